/**
 * The scan policy's one rule (shared/scan/scan.ts): what each status is
 * answered under each policy, with scanning on and off, and the address
 * forms CLAMD_URL takes (shared/scan/clamd-scanner.ts).
 */
import { clamdAddress } from '../../shared/scan/clamd-scanner';
import {
  type ScanSettings,
  objectKeyOf,
  quarantineKeyOf,
  scanRefusal,
  type ScanPolicy,
  type ScanStatus,
} from '../../shared/scan/scan';

const on: ScanSettings = { enabled: true, defaultPolicy: 'clean-only' };
const off: ScanSettings = { enabled: false, defaultPolicy: 'clean-only' };
const key = 'acme/photo-ILm6DTZ4Wc-R.jpg';

function answer(
  settings: ScanSettings,
  policy: ScanPolicy | undefined,
  status: ScanStatus | undefined,
) {
  const refusal = scanRefusal(settings, policy ? { scanPolicy: policy } : {}, {
    key,
    scanStatus: status,
  });
  return refusal ? `${refusal.status} ${refusal.code}` : 'served';
}

describe('scanRefusal', () => {
  it.each([
    // policy, status, answer
    [undefined, 'clean', 'served'],
    [undefined, 'pending', '409 SCAN_PENDING'],
    [undefined, 'unscanned', '409 FILE_NOT_SCANNED'],
    [undefined, undefined, '409 FILE_NOT_SCANNED'],
    [undefined, 'infected', '403 FILE_INFECTED'],
    ['clean-only', 'pending', '409 SCAN_PENDING'],
    ['not-infected', 'pending', 'served'],
    ['not-infected', 'unscanned', 'served'],
    ['not-infected', undefined, 'served'],
    ['not-infected', 'infected', '403 FILE_INFECTED'],
  ] as const)('scanning on, policy %s, %s: %s', (policy, status, expected) => {
    expect(answer(on, policy, status)).toBe(expected);
  });

  it('follows SCAN_POLICY for organizations without a policy of their own', () => {
    const lenient: ScanSettings = { enabled: true, defaultPolicy: 'not-infected' };
    expect(answer(lenient, undefined, 'pending')).toBe('served');
    expect(answer(lenient, 'clean-only', 'pending')).toBe('409 SCAN_PENDING');
  });

  it('serves everything with scanning off, except what was found infected', () => {
    for (const status of [undefined, 'pending', 'unscanned', 'clean'] as const) {
      expect(answer(off, undefined, status)).toBe('served');
    }
    expect(answer(off, undefined, 'infected')).toBe('403 FILE_INFECTED');
  });

  it('a pending refusal says when to ask again; each carries the status', () => {
    const refusal = scanRefusal(on, {}, { key, scanStatus: 'pending' })!;
    expect(refusal.headers).toEqual({ 'Retry-After': '5' });
    expect(refusal.extra).toEqual({ scanStatus: 'pending' });
  });
});

describe('quarantine keys and CLAMD_URL', () => {
  it('keeps the quarantined key whole under the organization, and reads objects there', () => {
    const q = quarantineKeyOf('acme', key);
    expect(q).toBe(`acme/.quarantine/${key}`);
    expect(objectKeyOf({ key })).toBe(key);
    expect(objectKeyOf({ key, quarantineKey: q })).toBe(q);
  });

  it('takes tcp://host:port and unix:/path', () => {
    expect(clamdAddress('tcp://clamd:3310')).toEqual({ host: 'clamd', port: 3310 });
    expect(clamdAddress('tcp://[::1]:3310')).toEqual({ host: '::1', port: 3310 });
    expect(clamdAddress('unix:/run/clamav/clamd.ctl')).toEqual({ path: '/run/clamav/clamd.ctl' });
  });
});
