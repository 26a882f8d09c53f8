/**
 * The configuration past one machine: secrets read from `<NAME>_FILE`, REDIS_URL
 * naming a Redis Cluster (and QUEUE_PREFIX as its hash tag), S3 credentials
 * (static keys with a session token, or a web identity) and addressing style,
 * and tracing from the standard OTEL_* variables.
 */
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, SECRET_VARIABLES, loadConfig } from '../../shared/config';
import { parseRedisUrl } from '../../shared/queue/redis-url';

const problemsOf = (env: NodeJS.ProcessEnv): string[] => {
  try {
    loadConfig(env);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  throw new Error('expected a ConfigError');
};

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'config-secrets-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Writes `content` to a file of the temporary directory and returns its path. */
const secretFile = (name: string, content: string): string => {
  const path = join(dir, name);
  writeFileSync(path, content);
  return path;
};

const S3 = { S3_ENDPOINT: 'https://s3.example.com' };

describe('secrets from files (<NAME>_FILE)', () => {
  it('reads each secret variable from its _FILE, trailing newline trimmed', () => {
    const config = loadConfig({
      ...S3,
      MONGODB_URI_FILE: secretFile(
        'mongo',
        'mongodb://db-0:27017,db-1:27017/media?replicaSet=rs0\n',
      ),
      REDIS_URL_FILE: secretFile('redis', 'redis://:p%40ss@redis:6379\r\n'),
      S3_ACCESS_KEY_FILE: secretFile('ak', 'AKIAEXAMPLE\n\n'),
      S3_SECRET_KEY_FILE: secretFile('sk', 'secret with spaces  \n'),
      S3_SESSION_TOKEN_FILE: secretFile('st', 'token'),
      METRICS_TOKEN_FILE: secretFile('metrics', 'm3tr1cs\n'),
      DASHBOARD_USER_FILE: secretFile('user', 'ops\n'),
      DASHBOARD_PASSWORD_FILE: secretFile('password', 'pw\n'),
      OTEL_EXPORTER_OTLP_HEADERS_FILE: secretFile('otlp', 'x-api-key=abc%3D\n'),
      OTEL_TRACES_EXPORTER: 'otlp',
    });
    expect(config.mongodbUri).toBe('mongodb://db-0:27017,db-1:27017/media?replicaSet=rs0');
    expect(config.redisUrl).toBe('redis://:p%40ss@redis:6379');
    expect(config.s3).toMatchObject({
      accessKey: 'AKIAEXAMPLE',
      // Only line ends are trimmed: a secret's own spaces stay.
      secretKey: 'secret with spaces  ',
      sessionToken: 'token',
    });
    expect(config.metricsToken).toBe('m3tr1cs');
    expect(config.dashboard).toMatchObject({ user: 'ops', password: 'pw', write: false });
    expect(config.tracing?.otlp.headers).toEqual({ 'x-api-key': 'abc=' });
  });

  it('covers every credential the schema reads', () => {
    expect([...SECRET_VARIABLES].sort()).toEqual([
      'DASHBOARD_PASSWORD',
      'DASHBOARD_USER',
      'METRICS_TOKEN',
      'MONGODB_URI',
      'OTEL_EXPORTER_OTLP_HEADERS',
      'REDIS_URL',
      'S3_ACCESS_KEY',
      'S3_SECRET_KEY',
      'S3_SESSION_TOKEN',
      'URL_SIGNING_KEYS',
    ]);
  });

  it('refuses a variable set both ways, naming both', () => {
    expect(problemsOf({ METRICS_TOKEN: 'a', METRICS_TOKEN_FILE: secretFile('m2', 'b') })).toEqual([
      'METRICS_TOKEN: both METRICS_TOKEN and METRICS_TOKEN_FILE are set; set one of them',
    ]);
  });

  it('refuses a file it cannot read, naming the variable, with every other problem', () => {
    const unreadable = secretFile('unreadable', 'x');
    chmodSync(unreadable, 0o000);
    const canRead = (() => {
      try {
        readFileSync(unreadable);
        return true; // running as root: permissions do not stop it
      } catch {
        return false;
      }
    })();
    const problems = problemsOf({
      MONGODB_URI_FILE: join(dir, 'missing'),
      ...(canRead ? {} : { REDIS_URL_FILE: unreadable }),
      PORT: 'x',
    });
    expect(problems).toEqual(
      expect.arrayContaining([
        `MONGODB_URI_FILE: cannot read ${join(dir, 'missing')} (ENOENT)`,
        expect.stringMatching(/^PORT: /),
        ...(canRead ? [] : [`REDIS_URL_FILE: cannot read ${unreadable} (EACCES)`]),
      ]),
    );
    expect(problems).toHaveLength(canRead ? 2 : 3);
  });

  it('says a bad value came from a file, without printing it', () => {
    const problems = problemsOf({ MONGODB_URI_FILE: secretFile('badmongo', 'http://secret@x\n') });
    expect(problems).toEqual([
      expect.stringMatching(/^MONGODB_URI \(from MONGODB_URI_FILE\): must be a mongodb/),
    ]);
    expect(problems.join()).not.toContain('secret@');
  });

  it('treats an empty _FILE as unset, and ignores _FILE of variables that are not secrets', () => {
    expect(loadConfig({ METRICS_TOKEN_FILE: '', METRICS_TOKEN: 't' }).metricsToken).toBe('t');
    expect(loadConfig({ PORT_FILE: secretFile('port', '1234') }).port).toBe(3000);
  });
});

describe('MongoDB connection strings', () => {
  it('takes replica sets, SRV records and options as they are', () => {
    for (const uri of [
      'mongodb://db-0.db:27017,db-1.db:27017,db-2.db:27017/media?replicaSet=rs0&readPreference=primary',
      'mongodb://app:p%40ss@db-0:27017,db-1:27017/media?replicaSet=rs0&retryWrites=true&w=majority',
      'mongodb+srv://app:pw@cluster0.example.mongodb.net/media?retryWrites=true&w=majority',
      'mongodb://127.0.0.1:27017',
    ]) {
      expect(loadConfig({ MONGODB_URI: uri }).mongodbUri).toBe(uri);
    }
    expect(problemsOf({ MONGODB_URI: 'postgres://db/media' })).toEqual([
      expect.stringMatching(/^MONGODB_URI: must be a mongodb/),
    ]);
  });
});

describe('Redis: one server or a cluster', () => {
  it('parses cluster URLs: seed nodes, credentials, TLS', () => {
    expect(parseRedisUrl('redis://127.0.0.1:6379')).toEqual({
      mode: 'single',
      url: 'redis://127.0.0.1:6379',
    });
    expect(parseRedisUrl('rediss+cluster://app:p%40ss@10.0.0.1:6380,10.0.0.2,[::1]:7000')).toEqual({
      mode: 'cluster',
      nodes: [
        { host: '10.0.0.1', port: 6380 },
        { host: '10.0.0.2', port: 6379 },
        { host: '::1', port: 7000 },
      ],
      username: 'app',
      password: 'p@ss',
      tls: true,
    });
    expect(parseRedisUrl('redis+cluster://:pw@redis-0.redis:6379/0')).toMatchObject({
      nodes: [{ host: 'redis-0.redis', port: 6379 }],
      username: undefined,
      password: 'pw',
      tls: false,
    });
  });

  it('refuses bad Redis URLs, naming REDIS_URL and never the password', () => {
    for (const url of [
      'http://x',
      'redis+cluster://',
      'redis+cluster://h:99999',
      'redis+cluster://:secret@h:1/3',
      'redis+cluster://h:1,,h:2',
    ]) {
      const problems = problemsOf({ REDIS_URL: url, QUEUE_PREFIX: '{m}' });
      expect(problems).toEqual([expect.stringMatching(/^REDIS_URL: /)]);
      expect(problems.join()).not.toContain('secret');
    }
  });

  it('wants QUEUE_PREFIX as a hash tag on a cluster, and accepts one anywhere', () => {
    expect(problemsOf({ REDIS_URL: 'redis+cluster://a:1,b:2' })).toEqual([
      expect.stringMatching(/^QUEUE_PREFIX: must be a hash tag such as \{media\} when REDIS_URL/),
    ]);
    expect(
      loadConfig({ REDIS_URL: 'redis+cluster://a:1,b:2', QUEUE_PREFIX: '{media}' }),
    ).toMatchObject({ redisUrl: 'redis+cluster://a:1,b:2', queuePrefix: '{media}' });
    expect(loadConfig({ QUEUE_PREFIX: '{media}' }).queuePrefix).toBe('{media}');
    expect(problemsOf({ QUEUE_PREFIX: '{me}dia' })).toEqual([
      expect.stringMatching(/^QUEUE_PREFIX: /),
    ]);
  });
});

describe('S3 credentials and addressing', () => {
  it('static keys, with a session token for temporary ones; path-style by default', () => {
    const s3 = loadConfig({
      ...S3,
      S3_ACCESS_KEY: 'ak',
      S3_SECRET_KEY: 'sk',
      S3_SESSION_TOKEN: 'st',
    }).s3!;
    expect(s3).toMatchObject({
      accessKey: 'ak',
      secretKey: 'sk',
      sessionToken: 'st',
      pathStyle: true,
    });
    expect(s3.webIdentity).toBeUndefined();
    expect(
      loadConfig({ ...S3, S3_ACCESS_KEY: 'a', S3_SECRET_KEY: 'b', S3_PATH_STYLE: 'false' }).s3!
        .pathStyle,
    ).toBe(false);
    expect(problemsOf({ S3_PATH_STYLE: 'yes' })).toEqual([
      expect.stringMatching(/^S3_PATH_STYLE: must be true or false/),
    ]);
  });

  it('a web identity (IRSA) when no keys are set; keys win when both are', () => {
    const tokenFile = secretFile('token', 'eyJ…');
    const role = 'arn:aws:iam::123456789012:role/media';
    const s3 = loadConfig({
      ...S3,
      AWS_WEB_IDENTITY_TOKEN_FILE: tokenFile,
      AWS_ROLE_ARN: role,
    }).s3!;
    expect(s3.webIdentity).toEqual({ tokenFile, roleArn: role });
    expect(s3.accessKey).toBeUndefined();
    const both = loadConfig({
      ...S3,
      S3_ACCESS_KEY: 'ak',
      S3_SECRET_KEY: 'sk',
      AWS_WEB_IDENTITY_TOKEN_FILE: tokenFile,
      AWS_ROLE_ARN: role,
    }).s3!;
    expect(both.webIdentity).toBeUndefined();
    expect(both.accessKey).toBe('ak');
  });

  it('names what is missing or wrong', () => {
    expect(problemsOf({ ...S3, S3_ACCESS_KEY: 'ak' })).toEqual([
      'S3_SECRET_KEY: is required with S3_ACCESS_KEY',
    ]);
    expect(problemsOf({ ...S3, AWS_ROLE_ARN: 'arn:aws:iam::123456789012:role/x' })).toEqual([
      'AWS_WEB_IDENTITY_TOKEN_FILE: is required with AWS_ROLE_ARN (web identity)',
    ]);
    expect(
      problemsOf({
        ...S3,
        AWS_WEB_IDENTITY_TOKEN_FILE: join(dir, 'nope'),
        AWS_ROLE_ARN: 'arn:aws:iam::123456789012:role/x',
      }),
    ).toEqual([`AWS_WEB_IDENTITY_TOKEN_FILE: cannot read ${join(dir, 'nope')} (ENOENT)`]);
    expect(
      problemsOf({
        ...S3,
        AWS_WEB_IDENTITY_TOKEN_FILE: secretFile('t2', 'x'),
        AWS_ROLE_ARN: 'media',
      }),
    ).toEqual([expect.stringMatching(/^AWS_ROLE_ARN: must be an IAM role ARN/)]);
    expect(problemsOf({ S3_SESSION_TOKEN: 'st' })).toEqual([
      'S3_SESSION_TOKEN: goes with S3_ACCESS_KEY and S3_SECRET_KEY',
    ]);
    expect(problemsOf(S3).sort()).toEqual([
      expect.stringMatching(
        /^S3_ACCESS_KEY: is required when S3_ENDPOINT is set \(or a web identity/,
      ),
      expect.stringMatching(/^S3_SECRET_KEY: is required when S3_ENDPOINT is set/),
    ]);
  });
});

describe('tracing (OTEL_*)', () => {
  it('is off by default and with OTEL_TRACES_EXPORTER=none', () => {
    expect(loadConfig({}).tracing).toBeUndefined();
    expect(loadConfig({ OTEL_TRACES_EXPORTER: 'none' }).tracing).toBeUndefined();
  });

  it('exports over OTLP/HTTP to the standard endpoints', () => {
    expect(loadConfig({ OTEL_TRACES_EXPORTER: 'otlp' }).tracing).toEqual({
      exporter: 'otlp',
      serviceName: undefined,
      otlp: { url: 'http://localhost:4318/v1/traces', protocol: 'http/protobuf', headers: {} },
      sampler: { name: 'parentbased_always_on', ratio: 1 },
    });
    const tracing = loadConfig({
      OTEL_TRACES_EXPORTER: 'otlp',
      OTEL_SERVICE_NAME: 'media-api-eu',
      OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer%20x, x-tenant=t1',
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.1',
    }).tracing!;
    expect(tracing).toEqual({
      exporter: 'otlp',
      serviceName: 'media-api-eu',
      otlp: {
        url: 'http://collector:4318/v1/traces',
        protocol: 'http/json',
        headers: { authorization: 'Bearer x', 'x-tenant': 't1' },
      },
      sampler: { name: 'parentbased_traceidratio', ratio: 0.1 },
    });
    expect(
      loadConfig({
        OTEL_TRACES_EXPORTER: 'otlp',
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://traces.example.com/api/v1/spans',
      }).tracing!.otlp.url,
    ).toBe('https://traces.example.com/api/v1/spans');
  });

  it('names bad values', () => {
    expect(
      problemsOf({
        OTEL_TRACES_EXPORTER: 'jaeger',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
        OTEL_EXPORTER_OTLP_HEADERS: 'no-equals-sign',
        OTEL_TRACES_SAMPLER_ARG: '2',
      })
        .map((p) => p.split(':')[0])
        .sort(),
    ).toEqual([
      'OTEL_EXPORTER_OTLP_HEADERS',
      'OTEL_EXPORTER_OTLP_PROTOCOL',
      'OTEL_TRACES_EXPORTER',
      'OTEL_TRACES_SAMPLER_ARG',
    ]);
  });
});
