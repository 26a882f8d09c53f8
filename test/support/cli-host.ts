/**
 * One CLI process that runs many commands (see `cliSession()` in ./cli.ts):
 * started like `npm run cli` starts the CLI (`node --import tsx`, in the
 * project, with the test's environment), it takes one command at a time over
 * IPC, runs it through the CLI's own `runCli()` (api/cli.ts: the same
 * parsing, configuration, data context, JSON on stdout and errors on stderr)
 * and answers the exit code the CLI's process would end with and what the
 * command wrote on stdout and stderr.
 */
import { runCli } from '../../api/cli';

interface Request {
  id: number;
  args: string[];
}

type Write = typeof process.stdout.write;

/** Runs `command` with everything written on stdout and stderr captured, not printed. */
async function captured(command: () => Promise<number>) {
  const out: string[] = [];
  const err: string[] = [];
  const capture =
    (into: string[]): Write =>
    (chunk: string | Uint8Array, ...rest: unknown[]) => {
      into.push(typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString());
      const done = rest.find((r) => typeof r === 'function') as (() => void) | undefined;
      done?.();
      return true;
    };
  const [stdout, stderr] = [process.stdout.write, process.stderr.write];
  process.stdout.write = capture(out);
  process.stderr.write = capture(err);
  try {
    const code = await command();
    return { code, stdout: out.join(''), stderr: err.join('') };
  } finally {
    process.stdout.write = stdout;
    process.stderr.write = stderr;
  }
}

let queue = Promise.resolve();
process.on('message', (message: Request) => {
  queue = queue.then(async () => {
    const result = await captured(() => runCli(message.args)).catch((err: unknown) => ({
      code: 1,
      stdout: '',
      stderr: `cli-host: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    }));
    process.send!({ id: message.id, ...result });
  });
});
// Ends when the test closes the channel.
process.on('disconnect', () => process.exit(0));
process.send!({ ready: true });
