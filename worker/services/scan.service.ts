/**
 * The malware scan of one stored file, on the workers: its bytes streamed
 * from the store to clamd (shared/scan/clamd-scanner.ts), the verdict
 * recorded on its record (only while `pending`: a scan delivered twice
 * records once). An infected file's object is moved to its organization's
 * quarantine prefix (copied, recorded, then removed from its key), with its
 * `media.infected` event and a log line naming the signature. clamd away or
 * failing is a 503: the job is retried with backoff and the file stays
 * `pending`, never served as clean.
 */
import { Errors } from '@shared/errors';
import type { Logger } from '@shared/logger';
import type { ScanOutcomeLabel } from '@shared/metrics';
import type { JobQueue } from '@shared/queue/job-queue';
import type { MediaRecord, MediaRepository } from '@shared/repositories/media.repository';
import type { OrganizationsRepository } from '@shared/repositories/organizations.repository';
import { ClamdError, type ClamdScanner } from '@shared/scan/clamd-scanner';
import { quarantineKeyOf, type ScanStatus } from '@shared/scan/scan';
import type { ObjectStore } from '@shared/storage/object-store';
import { derivedUuid } from '@shared/jobs';

export interface ScanServiceDeps {
  clamd: Pick<ClamdScanner, 'scan' | 'ping'>;
  store: Pick<ObjectStore, 'get' | 'copy' | 'remove'>;
  media: Pick<MediaRepository, 'recordScan'>;
  organizations: Pick<OrganizationsRepository, 'findById'>;
  /** Where scan jobs are queued (the `scan` queue); `ready` waits for its connection. */
  queue: Pick<JobQueue, 'add'> & { ready(): Promise<void> };
  /** Largest file sent to clamd (CLAMD_MAX_BYTES); larger ones are `unscanned`. */
  maxBytes: number;
  metrics?: { scanned(outcome: ScanOutcomeLabel, seconds: number, bytes: number): void };
  logger: Logger;
}

export class ScanService {
  constructor(private readonly deps: ScanServiceDeps) {}

  /** Queues the scan of a record (once per record: the job's id derives from its id). */
  async queue(record: Pick<MediaRecord, 'id' | 'organizationId' | 'key'>, requestId: string) {
    // The producer connects on first use and fails fast: the first add waits for it.
    await this.deps.queue.ready();
    await this.deps.queue.add(
      'media.scan',
      { organizationId: record.organizationId, requestId, mediaId: record.id, key: record.key },
      derivedUuid(`scan:${record.id}`),
      { uncapped: true },
    );
  }

  /** clamd answers (the worker's readiness). */
  ping(): Promise<void> {
    return this.deps.clamd.ping();
  }

  /**
   * Scans a pending record's object and records the verdict. Answers the
   * verdict, or `gone` when the record was deleted or had a verdict already.
   */
  async scan(
    record: MediaRecord,
    options: { signal?: AbortSignal; log?: Logger } = {},
  ): Promise<ScanStatus | 'gone'> {
    const log = options.log ?? this.deps.logger;
    const started = performance.now();
    const observe = (outcome: ScanOutcomeLabel) =>
      this.deps.metrics?.scanned(outcome, (performance.now() - started) / 1000, record.bytes);
    if (record.bytes > this.deps.maxBytes) {
      observe('unscanned');
      log.info(
        { key: record.key, bytes: record.bytes, limit: this.deps.maxBytes },
        'file over the scan limit: unscanned',
      );
      return this.record(record, { status: 'unscanned' });
    }
    let verdict;
    try {
      const body = await this.deps.store.get(record.key);
      verdict = await this.deps.clamd.scan(body, options.signal);
    } catch (err) {
      observe('error');
      if (err instanceof ClamdError) throw Errors.unavailable('clamd', err);
      throw err;
    }
    if (verdict.result === 'clean') {
      observe('clean');
      return this.record(record, { status: 'clean' });
    }
    if (verdict.result === 'over-limit') {
      observe('unscanned');
      log.warn(
        { key: record.key, bytes: record.bytes, reason: verdict.reason },
        'clamd did not scan the whole file: unscanned (lower CLAMD_MAX_BYTES to its limits)',
      );
      return this.record(record, { status: 'unscanned' });
    }
    observe('infected');
    const organization = await this.deps.organizations.findById(record.organizationId);
    if (!organization) throw Errors.notFound(`No organization with id ${record.organizationId}`);
    const quarantineKey = quarantineKeyOf(organization.slug, record.key);
    // Copied first: a crash before the record is updated leaves the file at its key, pending,
    // and the retry scans it again; after, the retry only removes what is left at its key.
    await this.deps.store.copy(record.key, quarantineKey);
    const recorded = await this.deps.media.recordScan(record.id, {
      status: 'infected',
      quarantineKey,
      signature: verdict.signature,
    });
    if (!recorded) {
      // Deleted meanwhile (its delete removed the key): the copy goes too.
      await this.deps.store.remove(quarantineKey);
      return 'gone';
    }
    await this.deps.store.remove(record.key);
    log.warn(
      {
        mediaId: record.id,
        organizationId: record.organizationId,
        key: record.key,
        quarantineKey,
        signature: verdict.signature,
      },
      'malware found: file quarantined',
    );
    return 'infected';
  }

  /** An infected record whose object may still be at its key (a retry after a crash): it goes. */
  async finishQuarantine(record: MediaRecord): Promise<void> {
    if (record.scanStatus === 'infected' && record.quarantineKey) {
      await this.deps.store.remove(record.key);
    }
  }

  private async record(
    record: MediaRecord,
    verdict: { status: 'clean' | 'unscanned' },
  ): Promise<ScanStatus | 'gone'> {
    return (await this.deps.media.recordScan(record.id, verdict)) ? verdict.status : 'gone';
  }
}
