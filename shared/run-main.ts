/**
 * The one way a process's `main()` ends on failure: the error is printed to
 * stderr (a configuration error, or another error meant for a person, as its
 * message; anything else with its stack) and the process exits with code 1.
 * A main that resolves with a number sets it as the exit code.
 */
import { ConfigError } from './config';

export function runMain(
  main: () => Promise<number | void>,
  options: {
    /** Errors printed as their message alone (besides ConfigError). */
    plain?: (err: unknown) => boolean;
    /** Put before the message, such as the program's name. */
    prefix?: string;
  } = {},
): void {
  main().then(
    (code) => {
      if (typeof code === 'number') process.exitCode = code;
    },
    (err: unknown) => {
      const plain = err instanceof ConfigError || options.plain?.(err) === true;
      const text =
        err instanceof Error ? (plain ? err.message : (err.stack ?? err.message)) : String(err);
      process.stderr.write(`${options.prefix ?? ''}${text}\n`);
      process.exit(1);
    },
  );
}
