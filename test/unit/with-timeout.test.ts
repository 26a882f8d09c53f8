/**
 * withTimeout (shared/with-timeout.ts): a bound on an answer, which must not
 * count the time the process itself was stalled against the answer.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { connect } from 'node:net';
import { withTimeout } from '../../shared/with-timeout';

// An echo server in a process of its own, as Redis is: its answer reaches the
// socket while this process is busy.
const ECHO = `
  const server = require('node:net').createServer((socket) => {
    socket.on('error', () => undefined);
    socket.on('data', (data) => socket.write(data));
  });
  server.listen(0, '127.0.0.1', () => console.log(server.address().port));
`;
let echo: ChildProcess;
let port: number;

beforeAll(async () => {
  echo = spawn(process.execPath, ['-e', ECHO], { stdio: ['ignore', 'pipe', 'inherit'] });
  const [line] = (await once(echo.stdout!, 'data')) as [Buffer];
  port = Number(String(line).trim());
});
afterAll(() => {
  echo.kill();
});

/** A request over a real socket; resolves with the answer when it is read. */
async function ask(): Promise<{ answer: Promise<string>; close(): void }> {
  const socket = connect(port, '127.0.0.1');
  await once(socket, 'connect');
  const answer = once(socket, 'data').then(([data]) => String(data));
  socket.write('PING');
  return { answer, close: () => socket.destroy() };
}

function blockFor(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // A synchronous task: nothing else runs meanwhile.
  }
}

it('answers with the value when the answer arrives in time', async () => {
  const request = await ask();
  try {
    await expect(withTimeout(request.answer, 1_000, 'echo')).resolves.toBe('PING');
  } finally {
    request.close();
  }
});

it('rejects, naming what did not answer, when nothing arrives within the bound', async () => {
  const never = new Promise<string>(() => undefined);
  await expect(withTimeout(never, 50, 'Redis')).rejects.toThrow(
    'Redis did not answer within 50 ms',
  );
});

it('takes an answer that arrived while the process was stalled past the bound', async () => {
  const request = await ask();
  try {
    const bounded = withTimeout(request.answer, 50, 'echo');
    // The echo arrives within a millisecond; the process looks at it only after a second,
    // when the 50 ms timer is due too.
    blockFor(1_000);
    await expect(bounded).resolves.toBe('PING');
  } finally {
    request.close();
  }
});
