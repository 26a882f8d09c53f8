/**
 * Reconciliation of object storage with the records in MongoDB: finds
 *
 * - objects without a record (an upload whose record write failed and whose
 *   clean-up failed too; a job's temporary input left by a job that vanished),
 * - records whose object is missing,
 * - multipart uploads still open (a put cut off by an outage or a crash),
 * - deletes cut off half-way (a record marked as being deleted),
 * - usage counters (the quota's count: files and their variants; and the
 *   stored job results') that differ from the records and result entries,
 *
 * and, with `fix`, removes the objects, aborts the uploads, deletes the
 * records (a record without its bytes can never be served; the report lists
 * each deleted record in full), finishes the deletes and sets the counters
 * from the records.
 *
 * Only what is older than `olderThanMs` is considered: an upload in flight has
 * its object (or its open multipart upload) before its record, and that
 * moment must never look like an orphan. A job's temporary input is spared
 * as long as a job that has not ended (read from the queue) names it. The bucket is listed as a stream and
 * checked against MongoDB in batches; memory holds one batch and what was found.
 *
 * Scoped to one organization, it lists the organization's key prefix and the
 * merged PDFs at the bucket's root (`merged_<ms>.pdf`), keeping those whose
 * record (or, with no record, whose key claim) belongs to the organization.
 *
 * Rendered variants (`.variants/<source key>/…`, GET /media/render) have no
 * record of their own: one is known while its source's record lists it, and
 * one it does not list (its source is gone, or a render or a variants delete
 * was cut off between the object and the record) is listed (`variant: true`)
 * and removed with `fix`. They are listed under `.variants/<org slug>/` in an
 * organization's scope.
 *
 * A quarantined file's object (`<org>/.quarantine/<key>`, an infected file's)
 * is known by the record that moved it there, whose object it is.
 */
import { RESULTS_SEGMENT } from '@shared/job-result';
import { ROOT_KEY_PREFIX } from '@shared/media/naming';
import { objectKeyOf } from '@shared/scan/scan';
import { sourceOfVariantKey, VARIANTS_PREFIX } from '@shared/media/render-options';
import type { MediaDeletion } from '@shared/media-deletion';
import type { MediaRestore } from '@shared/media-restore';
import type { MediaRecord, MediaRepository } from '@shared/repositories/media.repository';
import type { JobResultsRepository } from '@shared/repositories/job-results.repository';
import type { UsageCounters, UsageRepository } from '@shared/repositories/usage.repository';
import type { VariantsRepository } from '@shared/repositories/variants.repository';
import type { ObjectStore } from '@shared/storage/object-store';
import { DIRECT_SEGMENT } from '@shared/uploads/direct-uploads';

/** Objects checked against MongoDB per query; records checked against storage per batch. */
const BATCH = 500;
/** Storage lookups in flight at once while checking records. */
const STAT_CONCURRENCY = 8;
/** Objects removed per request. */
const REMOVE_BATCH = 1_000;
/** The prefix, under an organization's, of jobs' temporary inputs (see UploadService.storeTemporary). */
const TEMPORARY_SEGMENT = '/.tmp/';
/** Resumable uploads' bytes (api/services/resumable.service.ts), under the temporary prefix. */
const RESUMABLE_SEGMENT = '/.tmp/tus/';

export interface ReconcileOptions {
  /** Only this organization's objects (its key prefix), records and uploads; all when absent. */
  organization?: { id: number; slug: string } | null;
  /** Grace period: anything more recent than this is left alone. */
  olderThanMs: number;
  /** Remove what was found (otherwise only report it). */
  fix: boolean;
  /** Compare the usage counters with the records (default true). */
  checkUsage?: boolean;
  now?: Date;
}

export interface OrphanObject {
  key: string;
  bytes: number;
  lastModified: string;
  /** A job's temporary input (`<org>/.tmp/…`), whose job is gone. */
  temporary: boolean;
  /** A rendered variant (`.variants/<source key>/…`) whose source is gone. */
  variant: boolean;
}

/** A record whose object is missing, as the report lists it (in full: `fix` deletes it). */
export type MissingObjectRecord = Omit<MediaRecord, 'createdAt' | 'updatedAt'> & {
  createdAt: string;
  updatedAt: string;
};

/** An organization whose usage counter differs from its records (`actual`: the records plus the bookings in flight). */
export interface UsageDrift {
  organizationId: number;
  counted: UsageCounters;
  actual: UsageCounters;
}

/** A variant booked on its source's record and never written (its render's worker died). */
export interface UnwrittenVariantReport {
  organizationId: number;
  /** The source's key. */
  media: string;
  /** The variant's key (its object, if any of it was written). */
  key: string;
  bytes: number;
  /** When its writer's hold ran out. */
  pendingUntil: string;
}

export interface OpenUpload {
  key: string;
  uploadId: string;
  initiated: string;
}

export interface ReconcileReport {
  scope: {
    organization: string | null;
    prefix: string;
    olderThanMs: number;
    /** Only things last changed before this instant were considered. */
    cutoff: string;
  };
  /** True when what is listed was removed (objects, records) or aborted (uploads). */
  fixed: boolean;
  /** Nothing was found. */
  clean: boolean;
  objectsWithoutRecord: OrphanObject[];
  recordsWithoutObject: MissingObjectRecord[];
  incompleteUploads: OpenUpload[];
  /** Deletes cut off after their mark (the record is hidden; its object may remain). */
  deletesInProgress: MissingObjectRecord[];
  /** Restores from the trash cut off after their mark (the file is still in the trash; `--fix` finishes them). */
  restoresInProgress: MissingObjectRecord[];
  /**
   * Renders answered before their variant was written, whose writer died
   * before writing it (the booking's hold ran out before the cutoff): `--fix`
   * takes the booking off its record, removes any object it wrote and gives
   * its bytes back (the next request renders the variant again).
   */
  unwrittenVariants: UnwrittenVariantReport[];
  /** Usage counters that differ from the records (uploads in flight differ for a moment too). */
  usageDrift: UsageDrift[];
  scanned: {
    objects: number;
    records: number;
    incompleteUploads: number;
    /** Objects, records and uploads skipped because they are inside the grace period. */
    tooRecent: number;
    /** Temporary inputs skipped because a job not finished yet (waiting, delayed, active) owns them. */
    ownedByJobs: number;
  };
}

/** The jobs side (the queue): which temporary inputs a job not finished yet still owns. */
export interface JobInputs {
  temporaryKeysInUse(): Promise<Set<string>>;
}

export class ReconcileService {
  constructor(
    private readonly deps: {
      store: ObjectStore;
      media: Pick<
        MediaRepository,
        | 'recordedKeys'
        | 'recordedVariantKeys'
        | 'ownersOf'
        | 'countCreatedSince'
        | 'createdBefore'
        | 'removeByIds'
        | 'deletingBefore'
        | 'restoringBefore'
        | 'usageByOrganization'
      >;
      usage: Pick<UsageRepository, 'counts' | 'set' | 'release'>;
      /** Variants booked and never written (renders answered before the write); not checked without it. */
      variants?: Pick<VariantsRepository, 'unwrittenBefore' | 'dropBooking'>;
      /** Stored job results' entries; without it, the results' counter is not compared. */
      jobResults?: Pick<JobResultsRepository, 'bytesByOrganization'>;
      /** Finishes a delete that was cut off; tells the API replicas of records removed. */
      deletion: Pick<MediaDeletion, 'finish'> & Partial<Pick<MediaDeletion, 'forget'>>;
      /** Finishes a restore from the trash that was cut off; without it, such restores are only listed. */
      restore?: Pick<MediaRestore, 'finish'>;
      /** Without it, a temporary input is spared by the grace period only. */
      jobs?: JobInputs;
      /**
       * RESUMABLE_EXPIRY_MS (default 24 h): a resumable upload's bytes
       * (`<org>/.tmp/tus/…`) younger than it may belong to an upload in
       * progress and are left to the resumable uploads' own cleanup; counted
       * with `ownedByJobs`.
       */
      resumableExpiryMs?: number;
      /**
       * DIRECT_UPLOAD_EXPIRY_MS (default 1 h): a direct upload's object or
       * open multipart upload in quarantine (`<org>/.tmp/direct/…`) younger
       * than it may be an upload the client has not completed yet, and is
       * left to the uploads' own cleanup; counted with `ownedByJobs`.
       */
      directExpiryMs?: number;
      /**
       * The multipart uploads (by upload id) of resumable uploads in progress
       * (shared/resumable-uploads.ts): left open, counted with `tooRecent`.
       */
      resumableUploads?: () => Promise<Set<string>>;
    },
  ) {}

  async run(options: ReconcileOptions): Promise<ReconcileReport> {
    const now = options.now ?? new Date();
    const cutoff = new Date(now.getTime() - options.olderThanMs);
    const org = options.organization ?? null;
    const prefix = org ? `${org.slug}/` : '';
    const scanned = {
      objects: 0,
      records: 0,
      incompleteUploads: 0,
      tooRecent: 0,
      ownedByJobs: 0,
    };
    // Read before the listing: a job queued later has inputs younger than the listing.
    const ownedByJobs = (await this.deps.jobs?.temporaryKeysInUse()) ?? new Set<string>();
    const resumableExpiryMs = this.deps.resumableExpiryMs ?? 24 * 60 * 60 * 1000;
    const directSince = now.getTime() - (this.deps.directExpiryMs ?? 60 * 60 * 1000);
    /** In a direct upload's quarantine, and young enough to be an upload in progress. */
    const directInProgress = (key: string, at: Date) =>
      key.includes(DIRECT_SEGMENT) && at.getTime() >= directSince;

    // Uploads first: a put cut off half-way shows as an open upload, never as an object.
    const incompleteUploads: OpenUpload[] = [];
    const toAbort = [];
    const resumable = (await this.deps.resumableUploads?.()) ?? new Set<string>();
    for await (const upload of this.deps.store.incompleteUploads(prefix)) {
      scanned.incompleteUploads++;
      if (upload.initiated >= cutoff || resumable.has(upload.uploadId)) {
        scanned.tooRecent++;
        continue;
      }
      if (directInProgress(upload.key, upload.initiated)) {
        scanned.ownedByJobs++;
        continue;
      }
      toAbort.push(upload);
      incompleteUploads.push({
        key: upload.key,
        uploadId: upload.uploadId,
        initiated: upload.initiated.toISOString(),
      });
    }

    const objectsWithoutRecord: OrphanObject[] = [];
    type Listed = { key: string; size: number; lastModified: Date };
    const orphan = (o: Listed): OrphanObject => ({
      key: o.key,
      bytes: o.size,
      lastModified: o.lastModified.toISOString(),
      temporary: o.key.includes(TEMPORARY_SEGMENT) || o.key.includes(RESULTS_SEGMENT),
      variant: sourceOfVariantKey(o.key) !== null,
    });
    /**
     * Objects under the scope's own prefix: any record of that key makes them
     * known; a variant is known by the record that lists it (its source's).
     */
    const checkPrefixed = async (batch: Listed[]) => {
      const isVariant = (o: Listed) => sourceOfVariantKey(o.key) !== null;
      const [known, knownVariants] = await Promise.all([
        this.deps.media.recordedKeys(batch.filter((o) => !isVariant(o)).map((o) => o.key)),
        this.deps.media.recordedVariantKeys(batch.filter(isVariant).map((o) => o.key)),
      ]);
      for (const o of batch) {
        if (!(isVariant(o) ? knownVariants : known).has(o.key))
          objectsWithoutRecord.push(orphan(o));
      }
    };
    /** Root objects in an organization's scope: only those its record or claim gives it. */
    const checkRoot = async (batch: Listed[]) => {
      const owners = await this.deps.media.ownersOf(batch.map((o) => o.key));
      for (const o of batch) {
        const owner = owners.get(o.key);
        if (!owner || owner.organizationId !== org?.id) continue;
        scanned.objects++;
        if (!owner.recorded) objectsWithoutRecord.push(orphan(o));
      }
    };
    const scan = async (
      listPrefix: string,
      check: (batch: Listed[]) => Promise<void>,
      counted: boolean,
    ) => {
      let batch: Listed[] = [];
      for await (const object of this.deps.store.list(listPrefix)) {
        if (counted) scanned.objects++;
        if (object.lastModified >= cutoff) {
          if (counted) scanned.tooRecent++;
          continue;
        }
        if (
          ownedByJobs.has(object.key) ||
          (object.key.includes(RESUMABLE_SEGMENT) &&
            object.lastModified.getTime() >= now.getTime() - resumableExpiryMs) ||
          directInProgress(object.key, object.lastModified)
        ) {
          scanned.ownedByJobs++;
          continue;
        }
        batch.push(object);
        if (batch.length >= BATCH) {
          await check(batch);
          batch = [];
        }
      }
      if (batch.length > 0) await check(batch);
    };
    await scan(prefix, checkPrefixed, true);
    // The whole bucket's listing holds the variants too; an organization's does not.
    if (org) await scan(`${VARIANTS_PREFIX}${prefix}`, checkPrefixed, true);
    // The whole bucket's listing already holds the root; an organization's does not.
    if (org) await scan(ROOT_KEY_PREFIX, checkRoot, false);

    const recordsWithoutObject: MissingObjectRecord[] = [];
    scanned.tooRecent += await this.deps.media.countCreatedSince(cutoff, org?.id ?? null);
    let records: MissingObjectRecord[] = [];
    const checkRecords = async () => {
      for (let i = 0; i < records.length; i += STAT_CONCURRENCY) {
        const slice = records.slice(i, i + STAT_CONCURRENCY);
        const stats = await Promise.all(slice.map((r) => this.deps.store.stat(objectKeyOf(r))));
        slice.forEach((r, j) => {
          if (stats[j] === null) recordsWithoutObject.push(r);
        });
      }
      records = [];
    };
    for await (const record of this.deps.media.createdBefore(cutoff, org?.id ?? null, BATCH)) {
      scanned.records++;
      records.push({
        ...record,
        createdAt: record.createdAt.toISOString(),
        updatedAt: record.updatedAt.toISOString(),
      });
      if (records.length >= BATCH) await checkRecords();
    }
    await checkRecords();

    const deleting = await this.deps.media.deletingBefore(cutoff, org?.id ?? null);
    const deletesInProgress = deleting.map((r): MissingObjectRecord => ({
      ...r,
      createdAt: r.createdAt.toISOString(),
      updatedAt: r.updatedAt.toISOString(),
    }));

    const restoring = await this.deps.media.restoringBefore(cutoff, org?.id ?? null);
    const restoresInProgress = restoring.map((r): MissingObjectRecord => ({
      ...r,
      createdAt: r.createdAt.toISOString(),
      updatedAt: r.updatedAt.toISOString(),
    }));

    const unwritten = (await this.deps.variants?.unwrittenBefore(cutoff, org?.id ?? null)) ?? [];
    const unwrittenVariants = unwritten.map((u): UnwrittenVariantReport => ({
      organizationId: u.organizationId,
      media: u.key,
      key: u.variant.key,
      bytes: u.variant.bytes,
      pendingUntil: u.pendingUntil.toISOString(),
    }));

    if (options.fix) {
      for (const u of unwritten) {
        // Taken first (the booking, only the one seen): its object and bytes are then ours.
        if (
          !(await this.deps.variants!.dropBooking(
            u.organizationId,
            u.key,
            u.variant.id,
            u.pendingUntil,
          ))
        ) {
          continue;
        }
        await this.deps.store.remove(u.variant.key);
        const bytes = u.variant.bytes;
        await this.deps.usage.release(u.organizationId, { bytes, files: 0, variantBytes: bytes });
      }
      for (const record of deleting) await this.deps.deletion.finish(record);
      if (this.deps.restore) {
        // A folder of its name being deleted right now: the next run finishes it.
        for (const record of restoring) await this.deps.restore.finish(record).catch(() => null);
      }
      for (const upload of toAbort) await this.deps.store.abortIncompleteUpload(upload);
      for (let i = 0; i < objectsWithoutRecord.length; i += REMOVE_BATCH) {
        await this.deps.store.removeMany(
          objectsWithoutRecord.slice(i, i + REMOVE_BATCH).map((o) => o.key),
        );
      }
      for (let i = 0; i < recordsWithoutObject.length; i += REMOVE_BATCH) {
        const batch = recordsWithoutObject.slice(i, i + REMOVE_BATCH);
        await this.deps.media.removeByIds(batch.map((r) => r.id));
        for (const record of batch) await this.deps.deletion.forget?.(record);
      }
    }
    // After the fixes, so that they are counted as they leave things.
    const usageDrift =
      options.checkUsage === false ? [] : await this.usageDrift(org?.id ?? null, options.fix);

    return {
      scope: {
        organization: org?.slug ?? null,
        prefix,
        olderThanMs: options.olderThanMs,
        cutoff: cutoff.toISOString(),
      },
      fixed: options.fix,
      clean:
        objectsWithoutRecord.length === 0 &&
        recordsWithoutObject.length === 0 &&
        incompleteUploads.length === 0 &&
        deletesInProgress.length === 0 &&
        restoresInProgress.length === 0 &&
        unwrittenVariants.length === 0 &&
        usageDrift.length === 0,
      objectsWithoutRecord,
      recordsWithoutObject,
      incompleteUploads,
      deletesInProgress,
      restoresInProgress,
      unwrittenVariants,
      usageDrift,
      scanned,
    };
  }

  /**
   * Counters that differ from the records and the bookings in flight (files
   * counted whose records are not written yet; bookings past their expiry are
   * given back as they are read), of one organization or all; `fix` sets them.
   */
  private async usageDrift(organizationId: number | null, fix: boolean): Promise<UsageDrift[]> {
    const [recorded, results, counts] = await Promise.all([
      this.deps.media.usageByOrganization(organizationId),
      this.deps.jobResults?.bytesByOrganization(organizationId),
      this.deps.usage.counts(organizationId),
    ]);
    const zero: UsageCounters = { bytes: 0, files: 0, variantBytes: 0, resultBytes: 0 };
    const drift: UsageDrift[] = [];
    const ids = new Set([...recorded.keys(), ...(results?.keys() ?? []), ...counts.keys()]);
    for (const id of ids) {
      const c = counts.get(id)?.counted ?? zero;
      const booked = counts.get(id)?.booked ?? { bytes: 0, files: 0 };
      const r = recorded.get(id);
      const a: UsageCounters = {
        bytes: (r?.bytes ?? 0) + booked.bytes,
        files: (r?.files ?? 0) + booked.files,
        variantBytes: r?.variantBytes ?? 0,
        resultBytes: results ? (results.get(id) ?? 0) : c.resultBytes,
      };
      const differs = (Object.keys(zero) as (keyof UsageCounters)[]).some((k) => a[k] !== c[k]);
      if (differs) drift.push({ organizationId: id, counted: c, actual: a });
    }
    if (fix) for (const d of drift) await this.deps.usage.set(d.organizationId, d.actual);
    return drift.sort((x, y) => x.organizationId - y.organizationId);
  }
}
