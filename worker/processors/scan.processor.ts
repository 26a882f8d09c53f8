/**
 * media.scan: scans one stored file for malware and records the verdict
 * (worker/services/scan.service.ts). Queued by the scan listener on
 * `media.created`; on its own queue (`scan`), so scans never hold an image or
 * PDF slot. clamd away: a 503, retried with backoff (JOB_OPTIONS_OF), the file
 * stays `pending`. The payload is checked against the record: a job written
 * into Redis by hand scans nothing of another organization.
 */
import { Errors } from '@shared/errors';
import type { Processor } from '../registry';

export const scanProcessor: Processor<'media.scan', 'media' | 'scans'> = {
  name: 'media.scan',
  async process(job, ctx) {
    const { organizationId, mediaId, key } = job.data;
    const record = await ctx.media.findAnyById(mediaId);
    if (!record || record.organizationId !== organizationId || record.key !== key) {
      return { scanStatus: 'gone' };
    }
    if (!ctx.scans)
      throw Errors.unavailable('clamd', new Error('CLAMD_URL is not set on this worker'));
    if (record.deletingAt) return { scanStatus: 'gone' };
    if (record.scanStatus !== 'pending') {
      // An earlier attempt recorded its verdict: what it may have left at the key goes.
      await ctx.scans.finishQuarantine(record);
      return { scanStatus: 'gone' };
    }
    return { scanStatus: await ctx.scans.scan(record, { signal: job.signal, log: job.log }) };
  },
};
