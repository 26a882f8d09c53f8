/**
 * A body refused part-way (here: over MAX_FILE_SIZE) is answered at once, and
 * the answer reaches a client that is still sending: the server half-closes
 * and keeps reading what is in flight (RFC 9112 section 9.6) instead of
 * closing at once, which would make the kernel answer the client's next bytes
 * with a reset that can destroy the 413 before the client reads it.
 */
import { connect, type Socket } from 'node:net';
import { startApi, type TestApi, type TestOrg } from '../../support/api';
import { eventually } from '../../support/eventually';
import { fixture } from '../../support/files';

const MiB = 1024 * 1024;
let api: TestApi;
let org: TestOrg;
beforeAll(async () => {
  api = await startApi('early-answer', { env: { MAX_FILE_SIZE: String(MiB) } });
  org = await api.createOrg();
});
afterAll(() => api.close());

function write(socket: Socket, chunk: Buffer | string): Promise<void> {
  return new Promise((resolve, reject) =>
    socket.write(chunk, (err) => (err ? reject(err) : resolve())),
  );
}

it('answers 413 while the client still sends, reads the rest, and closes once the client is done', async () => {
  const { port } = new URL(api.url);
  const boundary = 'early-answer-boundary';
  const head = Buffer.concat([
    Buffer.from(
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.jpg"\r\nContent-Type: image/jpeg\r\n\r\n`,
    ),
    fixture('Canon_40D.jpg'),
  ]);
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  const fileBytes = 4 * MiB;
  const length = head.length + (fileBytes - fixture('Canon_40D.jpg').length) + tail.length;

  // Half-open, like an HTTP client that goes on sending after the server's FIN.
  const socket = connect({ port: Number(port), host: '127.0.0.1', allowHalfOpen: true });
  await new Promise((resolve) => socket.once('connect', resolve));
  const errors: Error[] = [];
  socket.on('error', (err) => errors.push(err));
  let response = '';
  socket.on('data', (d: Buffer) => (response += d.toString('latin1')));
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));

  await write(
    socket,
    `POST /media/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${org.auth.Authorization}\r\n` +
      `Content-Type: multipart/form-data; boundary=${boundary}\r\nContent-Length: ${length}\r\n\r\n`,
  );
  await write(socket, head);
  // Past the limit: the answer comes while 2+ MiB are still to be sent.
  let sent = head.length;
  const chunk = Buffer.alloc(64 * 1024);
  while (!response.includes('\r\n\r\n') && sent < 2 * MiB) {
    await write(socket, chunk);
    sent += chunk.length;
  }
  await eventually(() => expect(response).toContain('\r\n\r\n'), 1_000, 20); // the whole head
  expect(response).toMatch(/^HTTP\/1\.1 413 /);
  expect(response).toMatch(/\r\nconnection: close\r\n/i);

  // The client goes on sending what it had started: the server keeps reading.
  const remaining = length - tail.length - sent;
  for (let left = remaining; left > 0; left -= chunk.length) {
    await write(socket, left >= chunk.length ? chunk : chunk.subarray(0, left));
  }
  await write(socket, tail);
  socket.end();
  await closed;
  expect(errors).toEqual([]);
  const body = JSON.parse(response.slice(response.indexOf('\r\n\r\n') + 4)) as {
    statusCode: number;
    error: string;
  };
  expect(body).toMatchObject({ statusCode: 413, error: 'FILE_TOO_LARGE' });
  // Nothing stored.
  expect(await api.objectKeys(`${org.organization.slug}/`)).toEqual([]);
});
