/**
 * The guarded way out's target rules (shared/egress/): every address form the
 * service must refuse, as literals, as URL spellings and as what a name
 * resolves to (an injected resolver: no DNS), the allowlist, and the URL's
 * form (scheme, userinfo, port). Nothing is connected to here: the requests
 * themselves are tested in test/integration/egress/.
 */
import { parseAllowlist, refusedAddress } from '@shared/egress/address';
import {
  checkTarget,
  EgressRefused,
  type EgressPolicy,
  type ResolvedAddress,
} from '@shared/egress/egress';
import { parsePorts, parseRetrySchedule } from '@shared/egress/parsers';

const PUBLIC_V4 = '93.184.215.14';
const PUBLIC_V6 = '2606:2800:21f:cb07:6820:80da:af6b:8b2c';

describe('refusedAddress', () => {
  it.each([
    ['0.0.0.0', 'unspecified'],
    ['0.1.2.3', 'unspecified'],
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback'],
    ['10.0.0.1', 'private'],
    ['172.16.5.4', 'private'],
    ['192.168.1.1', 'private'],
    ['169.254.1.1', 'link-local'],
    ['169.254.169.254', 'metadata'],
    ['168.63.129.16', 'metadata'],
    ['100.64.0.1', 'carrier-grade NAT'],
    ['100.127.255.254', 'carrier-grade NAT'],
    ['224.0.0.1', 'multicast'],
    ['255.255.255.255', 'broadcast'],
    ['240.0.0.1', 'reserved'],
    ['192.0.2.1', 'reserved'],
    ['::', 'unspecified'],
    ['::1', 'loopback'],
    ['fe80::1', 'link-local'],
    ['fc00::1', 'unique-local'],
    ['fd12:3456::1', 'unique-local'],
    ['fd00:ec2::254', 'metadata'],
    ['fec0::1', 'site-local'],
    ['ff02::1', 'multicast'],
    ['::ffff:127.0.0.1', 'IPv4-mapped'],
    ['::ffff:7f00:1', 'IPv4-mapped'],
    ['::ffff:169.254.169.254', 'IPv4'],
    ['::ffff:8.8.8.8', 'IPv4-mapped'],
    ['::ffff:0:127.0.0.1', 'IPv4-translated'],
    ['::127.0.0.1', 'IPv4'],
    ['::7f00:1', 'compatible'],
    ['::a9fe:a9fe', 'compatible'],
    ['64:ff9b::127.0.0.1', 'NAT64'],
    ['64:ff9b::a9fe:a9fe', 'NAT64'],
    ['2002:7f00:1::', '6to4'],
    ['2002:c0a8:101::1', '6to4'],
    ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'teredo'],
    ['2001:db8::1', 'reserved'],
    ['2607:f8b0::5efe:7f00:1', 'ISATAP'],
    ['2607:f8b0::200:5efe:a00:1', 'ISATAP'],
    ['100::1', 'special-purpose'],
    ['4000::1', 'not a global unicast'],
  ])('%s is refused (%s)', (address, why) => {
    const refused = refusedAddress(address);
    expect(refused).not.toBeNull();
    expect(refused).toContain(why);
  });

  it.each([PUBLIC_V4, '8.8.8.8', '1.1.1.1', PUBLIC_V6, '2a00:1450:4001:81c::200e'])(
    '%s is public',
    (address) => expect(refusedAddress(address)).toBeNull(),
  );
});

/** A policy whose "DNS" is a table (a name missing from it does not resolve). */
function policy(
  names: Record<string, string[] | (() => string[])> = {},
  extra: Partial<EgressPolicy> = {},
): EgressPolicy {
  return {
    allowedPorts: [],
    allowlist: parseAllowlist(''),
    resolver: (host): Promise<ResolvedAddress[]> => {
      const entry = names[host];
      if (!entry) return Promise.reject(new Error(`ENOTFOUND ${host}`));
      const list = typeof entry === 'function' ? entry() : entry;
      return Promise.resolve(
        list.map((address) => ({ address, family: address.includes(':') ? 6 : 4 })),
      );
    },
    ...extra,
  };
}

async function reason(url: string, p: EgressPolicy = policy()): Promise<string> {
  try {
    await checkTarget(url, p);
  } catch (err) {
    if (err instanceof EgressRefused) return err.reason;
    throw err;
  }
  throw new Error(`${url} was allowed`);
}

describe('checkTarget refuses', () => {
  it.each([
    // IPv4 spellings the URL parser turns into 127.0.0.1 (decimal, octal, hex, short forms)
    'http://127.0.0.1/',
    'http://2130706433/',
    'http://017700000001/',
    'http://0177.0.0.1/',
    'http://0x7f.0.0.1/',
    'http://0x7f000001/',
    'http://127.1/',
    'http://0x7f.1/',
    'http://0/',
    'http://[::1]/',
    'http://[::ffff:127.0.0.1]/',
    'http://[::ffff:7f00:1]/',
    'http://[0:0:0:0:0:ffff:127.0.0.1]/',
    'http://[::127.0.0.1]/',
    'http://[64:ff9b::7f00:1]/',
    'http://[2002:7f00:1::1]/',
    'http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/',
    'http://[2607:f8b0::5efe:7f00:1]/',
    'http://169.254.169.254/latest/meta-data/',
    'http://[fd00:ec2::254]/',
    'http://168.63.129.16/',
    'http://100.64.0.1/',
    'http://10.0.0.1/',
    'http://[fe80::1%25eth0]/',
  ])('%s', async (url) => {
    await expect(checkTarget(url, policy())).rejects.toBeInstanceOf(EgressRefused);
  });

  it.each([
    ['http://localhost/', 'loopback name'],
    ['http://localhost./', 'loopback name'],
    ['http://LOCALHOST:80/', 'loopback name'],
    ['http://api.localhost/', 'loopback name'],
    ['file:///etc/passwd', 'scheme "file"'],
    ['gopher://example.com/', 'scheme "gopher"'],
    ['data:text/plain,hi', 'scheme "data"'],
    ['ftp://example.com/', 'scheme "ftp"'],
    ['http://user:pass@example.com/', 'credentials'],
    ['http://user@example.com/', 'credentials'],
    ['http://example.com:22/', 'port 22'],
    ['https://example.com:8443/', 'port 8443'],
    ['not a url', 'not an absolute URL'],
    ['http://intranet/', 'fully qualified'],
  ])('%s (%s)', async (url, why) => {
    expect(await reason(url, policy({ 'example.com': [PUBLIC_V4] }))).toContain(why);
  });

  it('a name resolving to a private address', async () => {
    expect(
      await reason('http://internal.example/', policy({ 'internal.example': ['10.1.2.3'] })),
    ).toContain('private');
  });

  it('a name with one private address among public ones, wherever it is', async () => {
    const names = {
      'mixed.example': [PUBLIC_V4, PUBLIC_V6, '127.0.0.1'],
      'mixed6.example': [PUBLIC_V4, '::ffff:10.0.0.1'],
    };
    expect(await reason('http://mixed.example/', policy(names))).toContain('loopback');
    expect(await reason('http://mixed6.example/', policy(names))).toContain('IPv4');
  });

  it('a name resolving to NAT64 or 6to4 forms of private addresses', async () => {
    const names = { 'n.example': ['64:ff9b::a00:1'], 's.example': ['2002:a00:1::1'] };
    expect(await reason('http://n.example/', policy(names))).toContain('NAT64');
    expect(await reason('http://s.example/', policy(names))).toContain('6to4');
  });
});

describe('checkTarget allows', () => {
  it('a public name, answering the checked address to connect to', async () => {
    const target = await checkTarget(
      'https://hooks.example/in?x=1',
      policy({ 'hooks.example': [PUBLIC_V4, PUBLIC_V6] }),
    );
    expect(target).toMatchObject({
      host: 'hooks.example',
      port: 443,
      address: { address: PUBLIC_V4 },
    });
  });

  it('a port EGRESS_ALLOWED_PORTS adds', async () => {
    const p = policy({ 'hooks.example': [PUBLIC_V4] }, { allowedPorts: parsePorts('8443') });
    await expect(checkTarget('https://hooks.example:8443/', p)).resolves.toMatchObject({
      port: 8443,
    });
  });

  it('what the allowlist opens: a CIDR, a named host; nothing more', async () => {
    const p = policy(
      {
        'hooks.internal': ['10.9.0.4'],
        'other.internal': ['10.9.0.5'],
        'x.example': ['192.168.0.9'],
      },
      { allowlist: parseAllowlist('hooks.internal, 192.168.0.0/24, 127.0.0.1') },
    );
    await expect(checkTarget('http://hooks.internal/', p)).resolves.toBeTruthy();
    await expect(checkTarget('http://hooks.internal./', p)).resolves.toBeTruthy();
    await expect(checkTarget('http://x.example/', p)).resolves.toBeTruthy();
    await expect(checkTarget('http://127.0.0.1/', p)).resolves.toBeTruthy();
    await expect(checkTarget('http://[::ffff:127.0.0.1]/', p)).resolves.toBeTruthy();
    await expect(checkTarget('http://other.internal/', p)).rejects.toBeInstanceOf(EgressRefused);
    await expect(checkTarget('http://127.0.0.2/', p)).rejects.toBeInstanceOf(EgressRefused);
    await expect(checkTarget('http://169.254.169.254/', p)).rejects.toBeInstanceOf(EgressRefused);
  });
});

describe('the configuration parsers', () => {
  it('reads the retry schedule and refuses nonsense', () => {
    expect(parseRetrySchedule('0,5s,5m,30m,2h,5h,10h,10h')).toEqual([
      0, 5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 36_000_000,
    ]);
    expect(parseRetrySchedule('0, 200ms')).toEqual([0, 200]);
    expect(() => parseRetrySchedule('5 days')).toThrow(/not a delay/);
  });

  it('refuses a bad allowlist entry and a bad port', () => {
    expect(() => parseAllowlist('10.0.0.0/99')).toThrow(/CIDR/);
    expect(() => parseAllowlist('exa mple')).toThrow(/host name nor a CIDR/);
    expect(() => parsePorts('80,99999')).toThrow(/99999/);
  });
});
