import { Writable } from 'node:stream';
import { createLogger } from '../../shared/logger';

describe('logger', () => {
  it('writes JSON and redacts credentials wherever they appear', () => {
    const lines: string[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(chunk.toString());
        done();
      },
    });
    const logger = createLogger({ level: 'info' }, sink);
    logger
      .child({ requestId: 'r1' })
      .info(
        { req: { headers: { authorization: 'Bearer secret-token', host: 'x' } }, token: 'abc' },
        'hello',
      );
    expect(lines).toHaveLength(1);
    const entry = JSON.parse(lines[0]!) as Record<string, unknown>;
    expect(entry).toMatchObject({
      level: 'info',
      msg: 'hello',
      requestId: 'r1',
      token: '[redacted]',
      req: { headers: { authorization: '[redacted]', host: 'x' } },
    });
    expect(lines[0]).not.toContain('secret-token');
  });
});
