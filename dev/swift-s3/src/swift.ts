/**
 * An S3 endpoint for the tests from OpenStack Swift's s3api middleware, as
 * installed by Debian's packages (`swift swift-proxy swift-account
 * swift-container swift-object memcached`), started as private processes.
 *
 * Each call to `startSwift` builds a fresh temporary directory with its own
 * swift.conf, rings, configs, device directory and logs, a private memcached
 * and the four Swift servers on free ports; nothing reads or writes /etc/swift
 * and no system service is involved, so several instances can run at once.
 *
 * Swift reads swift.conf from the hard-coded /etc/swift/swift.conf (there is
 * no environment variable for it), so every server is started through a tiny
 * Python launcher written into the temporary directory: it points Swift at
 * the private swift.conf before the server's own script runs, silences the
 * syslog handler (the servers run with `-v`, logging to stderr, which goes to
 * `<tmp>/logs/<server>.log`) and asks the kernel to SIGKILL the process if the
 * Node process that started it dies (PR_SET_PDEATHSIG; strictly: the thread
 * that spawned it, so call startSwift from the main thread), so a crashed test
 * run leaves no processes behind. A normal exit without stop() also removes
 * the directory; a killed Node process leaves the directory in TMPDIR.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { accessSync, closeSync, constants, openSync, readFileSync, rmSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { createServer, type Server } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { delimiter, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'minio';

export interface S3Backend {
  /** Base URL of the S3 API, e.g. `http://127.0.0.1:41234` (path-style addressing). */
  endpoint: string;
  region: string;
  accessKey: string;
  secretKey: string;
  /** Stops every process this backend started and removes its directory. Safe to call twice. */
  stop(): Promise<void>;
}

export interface StartSwiftOptions {
  /** Receives one line per start-up step and the final "ready" line. Default: silent. */
  log?: (line: string) => void;
}

const REGION = 'us-east-1';
/** tempauth `user_test_tester = testing .admin`: S3 access key is `account:user`. */
const ACCESS_KEY = 'test:tester';
const SECRET_KEY = 'testing';

/** Whole start-up budget, rings to first successful S3 request. */
const START_TIMEOUT_MS = 60_000;
/** How long a server gets between SIGTERM and SIGKILL. */
const STOP_GRACE_MS = 3_000;
/** Seconds a server keeps retrying a busy port before giving up (Swift's default is 30). */
const BIND_TIMEOUT_S = 3;
/** Start-up is retried with fresh ports when another process took one of ours. */
const START_ATTEMPTS = 2;
const LOG_TAIL_LINES = 25;

const SERVERS = ['proxy', 'account', 'container', 'object'] as const;
type ServerName = (typeof SERVERS)[number];
const RINGS = ['account', 'container', 'object'] as const;

const BINARIES = [
  ...SERVERS.map((server) => `swift-${server}-server`),
  'swift-ring-builder',
  'memcached',
] as const;

/** True when the Swift servers, the ring builder and memcached are installed. */
export function swiftAvailable(): boolean {
  return BINARIES.every((binary) => findExecutable(binary) !== undefined);
}

/** Starts a private Swift with s3api and resolves once an S3 request succeeds. */
export async function startSwift(opts: StartSwiftOptions = {}): Promise<S3Backend> {
  const log = opts.log ?? (() => {});
  const binaries = resolveBinaries();
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(binaries, log);
    } catch (err) {
      if (!(err instanceof PortTakenError) || attempt >= START_ATTEMPTS) throw err;
      log(`swift: a port was taken (${err.message.split('\n')[0] ?? ''}); retrying on fresh ports`);
    }
  }
}

// ---------------------------------------------------------------------------

interface Binaries {
  python: string;
  ringBuilder: string;
  memcached: string;
  servers: Record<ServerName, string>;
}

interface Ports {
  memcached: number;
  servers: Record<ServerName, number>;
}

interface Managed {
  name: string;
  child: ChildProcess;
  logPath: string;
  /** Set once the process has exited (or failed to spawn). */
  exit?: string;
  exited: Promise<void>;
}

/** Start-up failed; the message carries the tail of every server log. */
class StartError extends Error {}
/** Another process took one of our ports between probing and binding. */
class PortTakenError extends StartError {}

class SwiftInstance {
  private readonly processes: Managed[] = [];
  private stopping: Promise<void> | undefined;
  private readonly onExit = (): void => this.killNow();

  constructor(readonly dir: string) {
    process.once('exit', this.onExit);
  }

  spawn(name: string, python: string, args: string[]): Managed {
    const logPath = join(this.dir, 'logs', `${name}.log`);
    const fd = openSync(logPath, 'a');
    let child: ChildProcess;
    try {
      // detached: a new session and process group, so stop() can signal the group.
      child = spawn(python, [join(this.dir, 'launch.py'), String(process.pid), ...args], {
        cwd: this.dir,
        detached: true,
        stdio: ['ignore', fd, fd],
        env: { ...process.env, PYTHONUNBUFFERED: '1' },
      });
    } finally {
      closeSync(fd);
    }
    child.unref();
    const managed: Managed = {
      name,
      child,
      logPath,
      exited: new Promise<void>((resolve) => {
        child.once('exit', (code, signal) => {
          managed.exit = signal ? `killed by ${signal}` : `exited with code ${String(code)}`;
          resolve();
        });
        child.once('error', (err) => {
          managed.exit ??= `failed to start: ${err.message}`;
          resolve();
        });
      }),
    };
    this.processes.push(managed);
    return managed;
  }

  /** The first process that has died, if any (only meaningful before stop()). */
  deadProcess(): Managed | undefined {
    return this.processes.find((p) => p.exit !== undefined);
  }

  async logTails(): Promise<string> {
    const parts = await Promise.all(
      this.processes.map(async (p) => {
        const text = await readFile(p.logPath, 'utf8').catch(() => '');
        const lines = text.trimEnd().split('\n').slice(-LOG_TAIL_LINES).join('\n');
        return lines ? `--- ${p.name} (${p.logPath}), last lines ---\n${lines}` : '';
      }),
    );
    return parts.filter(Boolean).join('\n');
  }

  stop(): Promise<void> {
    this.stopping ??= this.shutdown();
    return this.stopping;
  }

  private async shutdown(): Promise<void> {
    await Promise.all(this.processes.map((p) => terminate(p)));
    await rm(this.dir, { recursive: true, force: true });
    process.removeListener('exit', this.onExit);
  }

  /** Synchronous last resort when Node exits without stop(). */
  private killNow(): void {
    for (const p of this.processes) if (p.exit === undefined) signalGroup(p, 'SIGKILL');
    rmSync(this.dir, { recursive: true, force: true });
  }
}

async function startOnce(binaries: Binaries, log: (line: string) => void): Promise<S3Backend> {
  const started = Date.now();
  const deadline = started + START_TIMEOUT_MS;
  const elapsed = (): string => `${((Date.now() - started) / 1000).toFixed(1)} s`;

  const dir = await mkdtemp(join(tmpdir(), 'swift-s3-'));
  const swift = new SwiftInstance(dir);
  const fail = async (reason: string, cause?: unknown): Promise<never> => {
    const tails = await swift.logTails();
    await swift.stop();
    const message = `Swift S3 backend did not start: ${reason}${tails ? `\n${tails}` : ''}`;
    if (/could not bind|address already in use/i.test(tails)) throw new PortTakenError(message);
    throw new StartError(message, { cause });
  };

  try {
    const [memcachedPort, proxy, account, container, object] = await freePorts(5);
    const ports: Ports = {
      memcached: memcachedPort!,
      servers: { proxy: proxy!, account: account!, container: container!, object: object! },
    };
    const user = userInfo().username;
    log(`swift: configuring ${dir}`);
    await writeConfigs(dir, ports, user);

    // Only the proxy reads the rings: memcached and the storage servers start
    // while the rings are being built.
    swift.spawn('memcached', binaries.python, [
      'exec',
      binaries.memcached,
      ...['-l', '127.0.0.1', '-p', String(ports.memcached), '-U', '0', '-m', '64', '-t', '2'],
      ...['-u', user],
    ]);
    const startServer = (server: ServerName): void => {
      swift.spawn(`${server}-server`, binaries.python, [
        'swift',
        dir,
        binaries.servers[server],
        join(dir, `${server}-server.conf`),
        '-v',
      ]);
    };
    for (const server of SERVERS) if (server !== 'proxy') startServer(server);
    await Promise.all([
      buildRings(binaries, dir, ports),
      checkXattrs(binaries.python, join(dir, 'devices', 'd1')),
    ]);
    log(`swift: rings built (${elapsed()}), starting proxy`);
    startServer('proxy');

    const waitUntil = async (what: string, probe: () => Promise<boolean>): Promise<void> => {
      let lastError: unknown;
      for (;;) {
        const dead = swift.deadProcess();
        if (dead) return fail(`${dead.name} ${dead.exit ?? 'exited'} while waiting for ${what}`);
        if (Date.now() > deadline) {
          const why = lastError instanceof Error ? ` (last error: ${lastError.message})` : '';
          return fail(`${what} not ready after ${START_TIMEOUT_MS / 1000} s${why}`, lastError);
        }
        try {
          if (await probe()) return;
        } catch (err) {
          lastError = err;
        }
        await sleep(100);
      }
    };

    await Promise.all(
      SERVERS.map((server) =>
        waitUntil(`${server}-server /healthcheck`, () => healthy(ports.servers[server])),
      ),
    );
    log(`swift: servers healthy (${elapsed()}), waiting for S3`);

    const endpoint = `http://127.0.0.1:${ports.servers.proxy}`;
    const client = new Client({
      endPoint: '127.0.0.1',
      port: ports.servers.proxy,
      useSSL: false,
      accessKey: ACCESS_KEY,
      secretKey: SECRET_KEY,
      region: REGION,
      pathStyle: true,
    });
    await waitUntil('S3 ListBuckets', async () => {
      await client.listBuckets();
      return true;
    });
    log(`swift: s3api ready at ${endpoint} in ${elapsed()} (logs in ${join(dir, 'logs')})`);

    return {
      endpoint,
      region: REGION,
      accessKey: ACCESS_KEY,
      secretKey: SECRET_KEY,
      stop: () => swift.stop(),
    };
  } catch (err) {
    if (err instanceof StartError) throw err;
    return fail(err instanceof Error ? err.message : String(err), err);
  }
}

// --- processes ---------------------------------------------------------------

function signalGroup(p: Managed, signal: NodeJS.Signals): void {
  const pid = p.child.pid;
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: the group is already gone.
  }
}

async function terminate(p: Managed): Promise<void> {
  if (p.exit !== undefined) return;
  signalGroup(p, 'SIGTERM');
  const timer = setTimeout(() => signalGroup(p, 'SIGKILL'), STOP_GRACE_MS);
  await p.exited;
  clearTimeout(timer);
}

function findExecutable(name: string): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/bin', '/usr/sbin'];
  for (const dir of dirs.filter(Boolean)) {
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

function resolveBinaries(): Binaries {
  const missing = BINARIES.filter((binary) => findExecutable(binary) === undefined);
  if (missing.length > 0) {
    throw new Error(
      `Swift S3 backend: ${missing.join(', ')} not found; apt-get install swift swift-proxy swift-account swift-container swift-object memcached`,
    );
  }
  const path = (binary: (typeof BINARIES)[number]): string => findExecutable(binary)!;
  const servers = Object.fromEntries(
    SERVERS.map((server) => [server, path(`swift-${server}-server`)]),
  ) as Record<ServerName, string>;
  return {
    // Run the launcher with the interpreter the Swift scripts are written for
    // (Debian: /usr/bin/python3), not whatever python3 comes first on the PATH.
    python: interpreterOf(servers.proxy),
    ringBuilder: path('swift-ring-builder'),
    memcached: path('memcached'),
    servers,
  };
}

function interpreterOf(script: string): string {
  const firstLine = readFileSync(script, 'utf8').split('\n', 1)[0] ?? '';
  const words = firstLine.startsWith('#!') ? firstLine.slice(2).trim().split(/\s+/) : [];
  const interpreter = words[0]?.endsWith('/env') ? words[1] : words[0];
  return interpreter || 'python3';
}

/** Runs a short-lived command; rejects with `what`, its exit status and its output. */
function run(what: string, file: string, args: string[], cwd: string): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(file, args, { cwd, timeout: 30_000 }, (err, stdout, stderr) => {
      const output = `${stdout}${stderr}`.trim();
      if (!err) return resolve(output);
      const status = err.killed ? 'timed out' : `exit status ${String(err.code)}`;
      reject(new Error(`${what} failed (${status})${output ? `:\n${output}` : ''}`));
    });
  });
}

/**
 * `swift-ring-builder <ring>.builder create 6 1 1`, `add r1z1-127.0.0.1:<port>/d1 100`
 * and `rebalance` for each ring, run through the ring builder's own `main()`
 * in one Python process (nine separate interpreters cost seconds).
 */
async function buildRings(binaries: Binaries, dir: string, ports: Ports): Promise<void> {
  const commands = RINGS.flatMap((ring) => {
    const builder = join(dir, `${ring}.builder`);
    return [
      [builder, 'create', '6', '1', '1'],
      [builder, 'add', `r1z1-127.0.0.1:${ports.servers[ring]}/d1`, '100'],
      [builder, 'rebalance'],
    ];
  });
  const launcher = join(dir, 'launch.py');
  const args = [launcher, String(process.pid), 'ring-builder', binaries.ringBuilder];
  await run('building the rings', binaries.python, [...args, JSON.stringify(commands)], dir);
  await Promise.all(RINGS.map((ring) => stat(join(dir, `${ring}.ring.gz`))));
}

/** The object server keeps metadata in user xattrs; tmpfs before Linux 6.6 has none. */
async function checkXattrs(python: string, path: string): Promise<void> {
  const code = "import os, sys; os.setxattr(sys.argv[1], 'user.swift.probe', b'1')";
  await run('xattr probe', python, ['-c', code, path], path).catch((err: Error) => {
    throw new Error(
      `${path} does not support user xattrs, which Swift's object server needs; point TMPDIR at a filesystem that does (ext4, xfs): ${err.message}`,
    );
  });
}

// --- network -----------------------------------------------------------------

/** Distinct free ports: all are held open together, then released. */
async function freePorts(count: number): Promise<number[]> {
  const servers: Server[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const server = createServer();
      servers.push(server);
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(0, '127.0.0.1', resolve);
      });
    }
    return servers.map((server) => {
      const address = server.address();
      if (!address || typeof address === 'string') throw new Error('no port from the OS');
      return address.port;
    });
  } finally {
    await Promise.all(
      servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))),
    );
  }
}

function healthy(port: number): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port, path: '/healthcheck', timeout: 2_000 },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode === 200));
      },
    );
    req.on('timeout', () => req.destroy(new Error(`GET :${port}/healthcheck timed out`)));
    req.on('error', reject);
    req.end();
  });
}

// --- configuration -----------------------------------------------------------

async function writeConfigs(dir: string, ports: Ports, user: string): Promise<void> {
  await mkdir(join(dir, 'devices', 'd1'), { recursive: true });
  await mkdir(join(dir, 'logs'));
  const common = (server: ServerName): string[] => [
    '[DEFAULT]',
    'bind_ip = 127.0.0.1',
    `bind_port = ${ports.servers[server]}`,
    `bind_timeout = ${BIND_TIMEOUT_S}`,
    // One process per server: no forked workers to track, quick start.
    'workers = 0',
    // The servers drop privileges to `user`; the current user always exists.
    `user = ${user}`,
    `swift_dir = ${dir}`,
    `devices = ${join(dir, 'devices')}`,
    'mount_check = false',
    `log_name = ${server}-server`,
    '',
  ];
  const filter = (name: string, egg: string, ...options: string[]): string[] => [
    `[filter:${name}]`,
    `use = egg:swift#${egg}`,
    ...options,
    '',
  ];
  const storage = (server: Exclude<ServerName, 'proxy'>): string[] => [
    ...common(server),
    '[pipeline:main]',
    `pipeline = healthcheck ${server}-server`,
    '',
    `[app:${server}-server]`,
    `use = egg:swift#${server}`,
    '',
    ...filter('healthcheck', 'healthcheck'),
  ];
  const proxy = [
    ...common('proxy'),
    '[pipeline:main]',
    'pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats bulk s3api tempauth copy slo dlo proxy-logging proxy-server',
    '',
    '[app:proxy-server]',
    'use = egg:swift#proxy',
    'account_autocreate = true',
    '',
    ...filter('catch_errors', 'catch_errors'),
    ...filter('gatekeeper', 'gatekeeper'),
    ...filter('healthcheck', 'healthcheck'),
    ...filter('proxy-logging', 'proxy_logging'),
    ...filter('cache', 'memcache', `memcache_servers = 127.0.0.1:${ports.memcached}`),
    ...filter('listing_formats', 'listing_formats'),
    ...filter('bulk', 'bulk'),
    ...filter('s3api', 's3api', `location = ${REGION}`),
    ...filter('tempauth', 'tempauth', 'user_test_tester = testing .admin'),
    ...filter('copy', 'copy'),
    ...filter('slo', 'slo'),
    ...filter('dlo', 'dlo'),
  ];
  const swiftConf = [
    '[swift-hash]',
    `swift_hash_path_suffix = ${randomBytes(8).toString('hex')}`,
    `swift_hash_path_prefix = ${randomBytes(8).toString('hex')}`,
    '',
    '[storage-policy:0]',
    'name = Policy-0',
    'default = yes',
    '',
  ];
  const files: Record<string, string[]> = {
    'swift.conf': swiftConf,
    'proxy-server.conf': proxy,
    'account-server.conf': storage('account'),
    'container-server.conf': storage('container'),
    'object-server.conf': storage('object'),
  };
  await Promise.all([
    writeFile(join(dir, 'launch.py'), LAUNCHER),
    ...Object.entries(files).map(([name, lines]) => writeFile(join(dir, name), lines.join('\n'))),
  ]);
}

/**
 * launch.py <parent pid> exec <program> <args...>
 * launch.py <parent pid> ring-builder <swift-ring-builder path> <JSON list of argument lists>
 * launch.py <parent pid> swift <swift_dir> <server script> <conf> -v
 */
const LAUNCHER = `"""Starts one process of a private test Swift (written by dev/swift-s3/src/swift.ts)."""
import ctypes
import os
import runpy
import signal
import sys

PR_SET_PDEATHSIG = 1

parent_pid, mode, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]

# Die with the Node process that started us, even if it never calls stop().
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
if os.getppid() != parent_pid:
    sys.exit('launch.py: parent %d is gone' % parent_pid)

if mode == 'exec':
    os.execvp(args[0], args)

if mode == 'ring-builder':
    # Same as running "swift-ring-builder <args>" once per argument list.
    import json
    from swift.cli.ringbuilder import main
    for command in json.loads(args[1]):
        print('$ swift-ring-builder ' + ' '.join(command), flush=True)
        try:
            main([args[0]] + command)
            status = 0
        except SystemExit as e:
            status = e.code or 0
        if status not in (0, 1):  # 1 = completed with warnings
            sys.exit('swift-ring-builder %s: exit status %s' % (' '.join(command), status))
    sys.exit(0)

swift_dir, script, server_args = args[0], args[1], args[2:]

# Log to stderr only (-v adds a console handler); no syslog.
import logging.handlers
logging.handlers.SysLogHandler.emit = lambda self, record: None

# Swift hard-codes /etc/swift/swift.conf; use ours before anything reads it.
from swift.common import utils
utils.SWIFT_CONF_FILE = os.path.join(swift_dir, 'swift.conf')
utils.HASH_PATH_PREFIX = utils.HASH_PATH_SUFFIX = b''
utils.validate_configuration()
from swift.common import constraints, storage_policy
constraints.reload_constraints()
storage_policy.reload_storage_policies()

sys.argv = [script] + server_args
runpy.run_path(script, run_name='__main__')
`;
