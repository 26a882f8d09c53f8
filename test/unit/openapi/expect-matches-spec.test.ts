/**
 * test/support/openapi.ts's expectMatchesSpec, which the integration tests
 * run on every answer: it accepts what the code sends (record envelopes,
 * success(), downloads, bodiless answers) and rejects drift (extra fields,
 * wrong types, unlisted error codes, undescribed statuses and operations,
 * missing required headers), naming what is wrong.
 */
import type { Response } from 'express';
import { success } from '../../../api/http/respond';
import { toMediaView } from '../../../api/domain/media-view';
import { Errors } from '../../../shared/errors';
import { expectMatchesSpec } from '../../support/openapi';
import {
  errorResponse,
  jsonHeaders,
  sampleRecord,
  validEnvelope,
  views,
  type JsonObject,
} from './samples';

describe('expectMatchesSpec', () => {
  it('accepts a valid record envelope, with or without headers', () => {
    expect(() => expectMatchesSpec('POST', '/media/upload', 201, validEnvelope())).not.toThrow();
    expect(() =>
      expectMatchesSpec('post', '/media/upload', 201, validEnvelope(), new Headers(jsonHeaders)),
    ).not.toThrow();
    expect(() =>
      expectMatchesSpec('POST', '/media/upload/multiple', 201, {
        ...validEnvelope(),
        data: { media: [validEnvelope().data, validEnvelope().data] },
      }),
    ).not.toThrow();
  });

  it('accepts what success() sends', () => {
    let body: unknown;
    let status = 0;
    const res = {
      status(code: number) {
        status = code;
        return res;
      },
      json(b: unknown) {
        body = b;
        return res;
      },
    };
    success(
      res as unknown as Response,
      toMediaView(sampleRecord(), views, { folderId: true, rootFolderId: 1 }),
      201,
    );
    expect(() => expectMatchesSpec('POST', '/media/upload/base64', status, body)).not.toThrow();
  });

  it('rejects an extra field in the record', () => {
    const body = validEnvelope();
    (body.data as unknown as JsonObject).jobId = null;
    expect(() => expectMatchesSpec('POST', '/media/upload', 201, body)).toThrow(
      /\/data: must NOT have unevaluated properties "jobId"/,
    );
  });

  it('rejects an extra field in the envelope', () => {
    const body = { ...validEnvelope(), ok: true };
    expect(() => expectMatchesSpec('POST', '/media/upload', 201, body)).toThrow(/"ok"/);
  });

  it('rejects a field of the wrong type, naming it', () => {
    const body = validEnvelope();
    (body.data as unknown as JsonObject).id = '42';
    (body.data as unknown as JsonObject).size = '245.61';
    const run = () => expectMatchesSpec('POST', '/media/upload', 201, body);
    expect(run).toThrow(/\/data\/id: must be integer/);
    expect(run).toThrow(/\/data\/size: must be number/);
  });

  it('rejects an error envelope with a code the response does not list', () => {
    const body = {
      statusCode: 404,
      message: 'No media with key "x"',
      error: 'FOLDER_NOT_FOUND',
      requestId: 'r1',
    };
    expect(() => expectMatchesSpec('GET', '/media/download', 404, body)).toThrow(/\/error/);
  });

  it('fails loudly for a status or an operation the spec does not describe', () => {
    expect(() => expectMatchesSpec('POST', '/media/upload', 418, {})).toThrow(
      /describes no 418 response .*described: 201, 400/,
    );
    expect(() => expectMatchesSpec('DELETE', '/media/upload', 200, {})).toThrow(
      /DELETE \/media\/upload is not described/,
    );
  });

  it('checks the headers the spec marks required', () => {
    const { status, headers, body } = errorResponse(Errors.unauthorized());
    expect(() =>
      expectMatchesSpec('POST', '/media/upload', status, body, { ...jsonHeaders, ...headers }),
    ).not.toThrow();
    expect(() => expectMatchesSpec('POST', '/media/upload', status, body, jsonHeaders)).toThrow(
      /required header WWW-Authenticate is missing/,
    );
  });

  it('checks binary downloads by their headers, and bodiless responses', () => {
    const headers = {
      'content-type': 'image/jpeg',
      'content-length': '1024',
      'content-range': 'bytes 0-1023/251505',
      etag: '"03d87850d2dd2c31b14aeb15125caefe33ce700feabd79c5c5c0b33ecf075e8f"',
      'last-modified': 'Sat, 22 Nov 2025 06:52:11 GMT',
      'cache-control': 'private, no-cache',
      'accept-ranges': 'bytes',
      'content-disposition': 'attachment; filename=holiday.jpg',
      'x-content-type-options': 'nosniff',
      'x-request-id': 'r1',
    };
    const bytes = Buffer.alloc(1024);
    expect(() => expectMatchesSpec('GET', '/media/download', 206, bytes, headers)).not.toThrow();
    const { 'content-range': _range, ...withoutRange } = headers;
    expect(() => expectMatchesSpec('GET', '/media/download', 206, bytes, withoutRange)).toThrow(
      /required header Content-Range is missing/,
    );
    expect(() =>
      expectMatchesSpec('GET', '/media/download', 200, bytes, {
        ...headers,
        'content-type': 'text/html',
      }),
    ).toThrow(/Content-Type "text\/html" is not one of image\/\*, application\/pdf/);
    expect(() => expectMatchesSpec('HEAD', '/media/download', 200, '', headers)).not.toThrow();
    expect(() => expectMatchesSpec('GET', '/media/download', 304, 'x', headers)).toThrow(
      /the spec describes none/,
    );
    expect(() =>
      expectMatchesSpec('GET', '/media/download', 200, bytes, { ...headers, etag: 'W/"abc"' }),
    ).toThrow(/header ETag/);
  });
});
