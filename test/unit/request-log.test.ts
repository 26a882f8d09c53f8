/**
 * The request log (api/middleware/request-log.ts) over a bare Express app and
 * real HTTP: at `info`, one line per request with its id, method, URL and
 * status; above `info` (LOG_LEVEL=warn), no line for an answer below 500 but
 * still the error line of a 500; probes never logged; the request's own
 * logger (`logOf(req)`) bound to the same. With the error handler: a 500's
 * cause at `error`, a switched-off feature's 501 at `info` like a refusal.
 */
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import express from 'express';
import type { Config } from '@shared/config';
import { createLogger } from '@shared/logger';
import { Errors } from '@shared/errors';
import { beginRequest, logOf } from '../../api/http/request-context';
import { errorHandler } from '../../api/middleware/error-handler';
import { requestLog } from '../../api/middleware/request-log';

async function withApp(
  level: Config['logLevel'],
  work: (get: (path: string) => Promise<number>) => Promise<void>,
): Promise<Record<string, unknown>[]> {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(JSON.parse(chunk.toString()) as Record<string, unknown>);
      done();
    },
  });
  const app = express();
  app.use(beginRequest());
  app.use(requestLog(createLogger({ level }, sink)));
  app.get('/ok', (_req, res) => void res.json({ ok: true }));
  app.get('/missing', (_req, res) => void res.status(404).json({ ok: false }));
  app.get('/fail', (_req, res) => void res.status(500).json({ ok: false }));
  app.get('/healthz', (_req, res) => void res.json({ ok: true }));
  app.get('/warns', (req, res) => {
    logOf(req)?.warn({ detail: 1 }, 'something to say');
    res.json({ ok: true });
  });
  app.get('/off', (_req, _res, next) => next(Errors.signedUrlsDisabled()));
  app.get('/broken', () => {
    throw new Error('a bug');
  });
  app.use(errorHandler);
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const { port } = server.address() as AddressInfo;
  try {
    await work(async (path) => {
      const res = await fetch(`http://127.0.0.1:${port}${path}`);
      await res.arrayBuffer();
      return res.status;
    });
  } finally {
    await new Promise((resolve) => server.close(resolve));
  }
  return lines;
}

it('writes one line per request at info, with its id, method, URL and status', async () => {
  const lines = await withApp('info', async (get) => {
    expect(await get('/ok')).toBe(200);
    expect(await get('/missing')).toBe(404);
    expect(await get('/healthz')).toBe(200);
  });
  expect(lines.map((l) => [l.level, (l.req as { url: string }).url])).toEqual([
    ['info', '/ok'],
    ['info', '/missing'],
  ]);
  expect(lines[0]).toMatchObject({ req: { method: 'GET', url: '/ok' }, res: { statusCode: 200 } });
  expect(typeof lines[0]!.requestId).toBe('string');
  expect(typeof lines[0]!.responseTime).toBe('number');
});

it('writes no line below the level (warn), and still the error line of a 500', async () => {
  const lines = await withApp('warn', async (get) => {
    expect(await get('/ok')).toBe(200);
    expect(await get('/missing')).toBe(404);
    expect(await get('/fail')).toBe(500);
  });
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatchObject({
    level: 'error',
    req: { method: 'GET', url: '/fail' },
    res: { statusCode: 500 },
  });
  expect(typeof lines[0]!.requestId).toBe('string');
});

it("binds the request's own logger to its id, method and URL", async () => {
  const lines = await withApp('warn', async (get) => {
    expect(await get('/warns')).toBe(200);
  });
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatchObject({
    level: 'warn',
    msg: 'something to say',
    detail: 1,
    req: { method: 'GET', url: '/warns' },
  });
  expect(typeof lines[0]!.requestId).toBe('string');
});

it("logs a switched-off feature's 501 as a refusal (info), a 500 from the error handler at error", async () => {
  const quiet = await withApp('warn', async (get) => {
    expect(await get('/off')).toBe(501);
    expect(await get('/broken')).toBe(500);
  });
  expect(quiet.map((l) => [l.level, l.msg, (l.req as { url: string }).url])).toEqual([
    ['error', 'Internal server error', '/broken'],
    ['error', 'request errored', '/broken'],
  ]);
  const all = await withApp('info', async (get) => {
    expect(await get('/off')).toBe(501);
  });
  expect(all).toEqual([
    expect.objectContaining({ level: 'info', code: 'SIGNED_URLS_DISABLED', status: 501 }),
    expect.objectContaining({ level: 'info', msg: 'request completed', res: { statusCode: 501 } }),
  ]);
});
