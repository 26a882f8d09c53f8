/**
 * The address limits and lockouts count by (api/middleware/client-address.ts):
 * with TRUST_PROXY=true the right-most X-Forwarded-For entry (what the proxy
 * appended), not the left-most one the client wrote; otherwise Express's
 * `req.ip`; IPv4-mapped addresses as IPv4, IPv6 by its /64.
 */
import { addressKey, clientAddress } from '../../api/middleware/client-address';

const request = (trust: unknown, xff: string | undefined, ip: string, socket = '10.0.0.1') => ({
  app: { get: (name: string) => (name === 'trust proxy' ? trust : undefined) },
  headers: xff === undefined ? {} : { 'x-forwarded-for': xff },
  ip,
  socket: { remoteAddress: socket },
});

describe('addressKey', () => {
  it('keeps IPv4, unwraps IPv4-mapped IPv6, and counts IPv6 by its /64', () => {
    expect(addressKey('203.0.113.9')).toBe('203.0.113.9');
    expect(addressKey('::ffff:127.0.0.1')).toBe('127.0.0.1');
    expect(addressKey('2001:db8:0:1:aaaa:bbbb:cccc:dddd')).toBe('2001:db8:0:1::/64');
    expect(addressKey('2001:db8:0:1::42')).toBe('2001:db8:0:1::/64');
    expect(addressKey('2001:0DB8:0000:0001::42')).toBe('2001:db8:0:1::/64');
    expect(addressKey('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(addressKey('::1')).toBe('0:0:0:0::/64');
    expect(addressKey('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
    expect(addressKey('64:ff9b::192.0.2.33')).toBe('64:ff9b:0:0::/64');
    expect(addressKey('unknown')).toBe('unknown');
  });

  it('gives one key to every address of one /64, and another to the next /64', () => {
    const keys = new Set(
      ['2001:db8:5:7::1', '2001:db8:5:7:ffff::', '2001:db8:5:7:1:2:3:4'].map(addressKey),
    );
    expect([...keys]).toEqual(['2001:db8:5:7::/64']);
    expect(addressKey('2001:db8:5:8::1')).not.toBe(addressKey('2001:db8:5:7::1'));
  });
});

describe('clientAddress', () => {
  it('with TRUST_PROXY=true takes the right-most X-Forwarded-For entry, whatever the client wrote before it', () => {
    expect(clientAddress(request(true, '1.1.1.1, 203.0.113.9', '1.1.1.1'))).toBe('203.0.113.9');
    expect(clientAddress(request(true, '9.9.9.9,8.8.8.8, 203.0.113.9', '9.9.9.9'))).toBe(
      '203.0.113.9',
    );
    // No header (or garbage in its last place): the socket's address.
    expect(clientAddress(request(true, undefined, '10.0.0.1'))).toBe('10.0.0.1');
    expect(clientAddress(request(true, '1.1.1.1, not-an-ip', '1.1.1.1'))).toBe('10.0.0.1');
  });

  it("otherwise takes Express's req.ip (a hop count or proxy list already skips the trusted hops)", () => {
    expect(clientAddress(request(1, '1.1.1.1, 203.0.113.9', '203.0.113.9'))).toBe('203.0.113.9');
    expect(clientAddress(request(false, '1.1.1.1', '::ffff:10.0.0.1'))).toBe('10.0.0.1');
    expect(clientAddress(request(['loopback'], undefined, '2001:db8::5'))).toBe(
      '2001:db8:0:0::/64',
    );
  });
});
