/**
 * Deleting an organization (`org:delete`), in an order that can be run again
 * after a crash: its tokens are revoked first (nothing new comes in), its
 * jobs that have not started are removed and those running are waited for,
 * then every file goes the way a single delete does (object, record, usage),
 * then what is left under its key prefix or claimed at the bucket's root
 * (orphans, temporary inputs, stored job results, open uploads, variants under `.variants/<slug>/`),
 * its folders, claims, result entries, usage counter and tokens, and last the organization itself.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '@shared/logger';
import type { MediaDeletion } from '@shared/media-deletion';
import { VARIANTS_PREFIX } from '@shared/media/render-options';
import type { Repositories } from '@shared/repositories';
import type { Organization } from '@shared/repositories/organizations.repository';
import type { ObjectStore } from '@shared/storage/object-store';

/** Tells the API replicas an organization changed (they drop it and its tokens from their caches). */
export interface OrganizationChanges {
  changed(organizationId: number): Promise<void>;
}

/** The queue side: an organization's jobs. */
export interface OrganizationJobs {
  removeUnstartedOf(organizationId: number): Promise<{ removed: number; active: number }>;
}

export interface OffboardingReport {
  organization: Organization;
  tokensRevoked: number;
  jobsRemoved: number;
  files: { count: number; bytes: number };
  /** Objects that had no record (orphans, temporary inputs) and uploads left open. */
  leftovers: { objects: number; incompleteUploads: number };
  folders: number;
  tokens: number;
}

const BATCH = 200;

export class OffboardingService {
  constructor(
    private readonly deps: {
      repositories: Repositories;
      store: ObjectStore;
      deletion: MediaDeletion;
      jobs: OrganizationJobs;
      /** Told once the tokens are revoked and again once the organization is gone. */
      changes?: OrganizationChanges;
      logger: Logger;
      /** How long to wait for the organization's running jobs (default 60 s). */
      activeJobsWaitMs?: number;
    },
  ) {}

  async delete(org: Organization): Promise<OffboardingReport> {
    const { media, folders, tokens, usage, organizations, jobResults } = this.deps.repositories;
    const tokensRevoked = await tokens.revokeAllOf(org.id);
    // Replicas refuse its tokens from now on, not when their cached entries expire.
    await this.deps.changes?.changed(org.id);
    const jobsRemoved = await this.stopJobs(org);

    const files = { count: 0, bytes: 0 };
    // Deletes cut off earlier first, then every record (the trash's too).
    for (const record of await media.deletingBefore(new Date(), org.id)) {
      await this.deps.deletion.finish(record);
    }
    for (;;) {
      const ids = await media.ids(org.id, undefined, BATCH, true);
      if (ids.length === 0) break;
      for (const id of ids) {
        const record = await media.findAnyById(id);
        if (record && (await this.deps.deletion.delete(record, { evenIfRestoring: true }))) {
          files.count++;
          files.bytes += record.bytes;
        }
      }
    }

    const leftovers = { objects: 0, incompleteUploads: 0 };
    const prefix = `${org.slug}/`;
    for await (const upload of this.deps.store.incompleteUploads(prefix)) {
      await this.deps.store.abortIncompleteUpload(upload);
      leftovers.incompleteUploads++;
    }
    const keys: string[] = [];
    for await (const object of this.deps.store.list(prefix)) keys.push(object.key);
    // Variants whose source went without them (each delete above removed its own).
    for await (const object of this.deps.store.list(`${VARIANTS_PREFIX}${prefix}`)) {
      keys.push(object.key);
    }
    keys.push(...(await media.claimedKeysOf(org.id)));
    for (let i = 0; i < keys.length; i += 1_000) {
      await this.deps.store.removeMany(keys.slice(i, i + 1_000));
    }
    leftovers.objects = keys.length;

    const folderCount = await folders.removeAll(org.id);
    await media.removeClaimsOf(org.id);
    // Its stored job results' objects went with its prefix above.
    await jobResults.removeAllOf(org.id);
    await usage.remove(org.id);
    const tokenCount = await tokens.removeAllOf(org.id);
    await organizations.remove(org.id);
    await this.deps.changes?.changed(org.id);
    return {
      organization: org,
      tokensRevoked,
      jobsRemoved,
      files,
      leftovers,
      folders: folderCount,
      tokens: tokenCount,
    };
  }

  /** Removes the jobs not started yet; waits (boundedly) for the running ones to end. */
  private async stopJobs(org: Organization): Promise<number> {
    const deadline = Date.now() + (this.deps.activeJobsWaitMs ?? 60_000);
    let removed = 0;
    for (;;) {
      const round = await this.deps.jobs.removeUnstartedOf(org.id);
      removed += round.removed;
      if (round.active === 0) return removed;
      if (Date.now() > deadline) {
        throw new Error(
          `${round.active} job(s) of "${org.slug}" are still running; run org:delete again once they end`,
        );
      }
      await sleep(500);
    }
  }
}
