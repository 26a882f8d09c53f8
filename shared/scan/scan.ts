/**
 * Malware scanning's vocabulary and its one rule: what a record's scan status
 * lets the service do with the file (download, render, sign, take as a job's
 * input), under its organization's policy. The scan itself runs on the
 * workers (worker/listeners/scan.listener.ts, worker/processors/scan.processor.ts).
 */
import { Errors, type AppError } from '../errors';

/**
 * - `pending`: stored, not scanned yet (the scan is queued or retrying);
 * - `clean`: clamd found nothing;
 * - `infected`: clamd named a signature; the object is quarantined;
 * - `unscanned`: larger than the scanner's limit; never reported clean.
 */
export const SCAN_STATUSES = ['pending', 'clean', 'infected', 'unscanned'] as const;
export type ScanStatus = (typeof SCAN_STATUSES)[number];

/**
 * Which files an organization is served while scanning is on:
 * `clean-only` (the default) only `clean` ones; `not-infected` also `pending`
 * and `unscanned` ones. `infected` files never.
 */
export const SCAN_POLICIES = ['clean-only', 'not-infected'] as const;
export type ScanPolicy = (typeof SCAN_POLICIES)[number];

/** Where an organization's quarantined objects lie: reached by no download (keys served are records' keys). */
export const QUARANTINE_SEGMENT = '/.quarantine/';

/** `<org>/.quarantine/<key>`: the key kept whole, so the original is known from it. */
export function quarantineKeyOf(orgSlug: string, key: string): string {
  return `${orgSlug}${QUARANTINE_SEGMENT}${key}`;
}

/** What the scanning settings say to the API and the workers. */
export interface ScanSettings {
  /** Scanning is on (CLAMD_URL is set). */
  enabled: boolean;
  /** The policy of organizations without their own (SCAN_POLICY). */
  defaultPolicy: ScanPolicy;
}

/**
 * The refusal of a file its organization's policy does not serve, or null
 * when it may be served. A record without a status was stored while
 * scanning was off: it counts as `unscanned`. Scanning off: everything is
 * served, as before scanning existed, except what was found infected.
 */
export function scanRefusal(
  settings: ScanSettings,
  organization: { scanPolicy?: ScanPolicy | undefined },
  record: { key: string; scanStatus?: ScanStatus | undefined },
): AppError | null {
  // Quarantined whatever the settings say now.
  if (record.scanStatus === 'infected') return Errors.fileInfected(record.key);
  if (!settings.enabled) return null;
  const status = record.scanStatus ?? 'unscanned';
  if (status === 'clean') return null;
  const policy = organization.scanPolicy ?? settings.defaultPolicy;
  if (policy === 'not-infected') return null;
  return status === 'pending' ? Errors.scanPending(record.key) : Errors.fileNotScanned(record.key);
}

/** Where a record's bytes lie: its key, or its quarantine key once infected. */
export function objectKeyOf(record: { key: string; quarantineKey?: string | undefined }): string {
  return record.quarantineKey ?? record.key;
}
