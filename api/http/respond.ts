/** The success envelope: `{ statusCode: 200, message: 'Success', data }` (the body always says 200). */
import type { Response } from 'express';

export interface SuccessBody<T> {
  statusCode: 200;
  message: 'Success';
  data: T;
}

export function success<T>(res: Response, data: T, httpStatus: 200 | 201 = 200): void {
  const body: SuccessBody<T> = { statusCode: 200, message: 'Success', data };
  res.status(httpStatus).json(body);
}
