/**
 * clamd for the malware-scanning tests: the Debian package's `clamd`
 * (`apt-get install clamav-daemon`), started per test file on a free loopback
 * port, Foreground, with a config and a signature database written here into
 * a temporary directory: one custom signature (`.ndb`) matching
 * TEST_MALWARE, so nothing is ever downloaded and the database loads in
 * well under a second. Limits are small so "over the limit" is cheap to test.
 * `stop()` and `start()` again on the same port: clamd away, then back.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { ClamdScanner } from '../../../shared/scan/clamd-scanner';
import { freePort, spawn, stopProcess, waitFor, which } from './process';

/** Bytes the tests' signature matches (like EICAR's test string, harmless). */
export const TEST_MALWARE = 'MEDIA-SERVICE-TEST-MALWARE-SIGNATURE-4f1d2c9b';
/** The name clamd reports for it (custom signatures are marked UNOFFICIAL). */
export const TEST_SIGNATURE = 'Media.Test.Malware.UNOFFICIAL';

export interface ClamdLimits {
  /** clamd's StreamMaxLength: INSTREAM refuses more ("size limit exceeded"). */
  streamMaxLength?: string;
  /** MaxScanSize and MaxFileSize: past them clamd stops reading. */
  maxScanSize?: string;
  /** Report a file past MaxScanSize/MaxFileSize (Heuristics.Limits.Exceeded) instead of "OK". */
  alertExceedsMax?: boolean;
}

export interface TestClamd {
  /** `tcp://127.0.0.1:<port>`, for CLAMD_URL. */
  url: string;
  /** Starts it again (after `stop`), on the same port; running already, nothing. */
  start(): Promise<void>;
  stop(): Promise<void>;
  /** Stops it and removes its directory. */
  close(): Promise<void>;
}

export const clamdBinary = (): string | undefined =>
  which('clamd') ?? ['/usr/sbin/clamd'].find((p) => which(p));

export async function startClamd(limits: ClamdLimits = {}): Promise<TestClamd> {
  const binary = clamdBinary();
  if (!binary) {
    throw new Error('No clamd for the scanning tests: apt-get install clamav-daemon');
  }
  const dir = await mkdtemp(join(tmpdir(), 'media-test-clamd-'));
  const port = await freePort();
  const db = join(dir, 'db');
  await mkdir(db);
  // clamd refuses to start on an empty database: the one signature comes first.
  const hex = Buffer.from(TEST_MALWARE).toString('hex');
  await writeFile(
    join(db, 'media-test.ndb'),
    `${TEST_SIGNATURE.replace('.UNOFFICIAL', '')}:0:*:${hex}\n`,
  );
  const config = join(dir, 'clamd.conf');
  await writeFile(
    config,
    [
      `DatabaseDirectory ${db}`,
      `TCPSocket ${port}`,
      'TCPAddr 127.0.0.1',
      'Foreground yes',
      `StreamMaxLength ${limits.streamMaxLength ?? '2M'}`,
      `MaxScanSize ${limits.maxScanSize ?? '4M'}`,
      `MaxFileSize ${limits.maxScanSize ?? '4M'}`,
      `AlertExceedsMax ${limits.alertExceedsMax ? 'yes' : 'no'}`,
      'SelfCheck 0',
      `LogFile ${join(dir, 'clamd.log')}`,
      `PidFile ${join(dir, 'clamd.pid')}`,
      '',
    ].join('\n'),
  );
  const url = `tcp://127.0.0.1:${port}`;
  const scanner = new ClamdScanner({ url, timeoutMs: 1_000 });
  let child: ChildProcess | undefined;
  const start = async () => {
    if (child && child.exitCode === null && child.signalCode === null) return;
    const started = spawn(binary, ['--config-file', config], { stdio: 'ignore' });
    child = started;
    await waitFor(
      'clamd',
      async () => {
        if (started.exitCode !== null)
          throw new Error(`clamd exited (${started.exitCode}); see ${dir}/clamd.log`);
        await scanner.ping();
        return true;
      },
      20_000,
      50,
    );
  };
  const stop = async () => {
    if (child) await stopProcess(child);
    child = undefined;
  };
  await start();
  return {
    url,
    start,
    stop,
    async close() {
      await stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}
