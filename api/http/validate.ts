/** The one mapping of a zod schema's failure to the API's 400 VALIDATION_FAILED. */
import type { z } from 'zod';
import { Errors } from '@shared/errors';

/** Parses `input` with `schema`, or throws VALIDATION_FAILED naming each field and what is wrong. */
export function parseInput<S extends z.ZodType>(schema: S, input: unknown): z.output<S> {
  const parsed = schema.safeParse(input);
  if (parsed.success) return parsed.data;
  throw Errors.validation(
    parsed.error.issues.map((i) => ({
      field: i.path.join('.') || (i.code === 'unrecognized_keys' ? i.keys.join(', ') : 'body'),
      message:
        i.code === 'unrecognized_keys' ? `unknown field(s): ${i.keys.join(', ')}` : i.message,
    })),
  );
}
