/**
 * Malware scanning: every new record still `pending` (scanning on; not a
 * result made of clean inputs) gets a `media.scan` job on the `scan` queue,
 * once (its id derives from the record's). All ways in pass here: uploads,
 * base64, conversions and merges, since each records `media.created`.
 */
import type { Listener } from './listener';

export const scanListener: Listener = {
  name: 'scan',
  events: ['media.created'],
  // Scanning off: media.created needs no delivery for it.
  enabled: (config) => config.scan.clamdUrl !== undefined,
  async handle(event, ctx) {
    if (!ctx.scans || event.type !== 'media.created') return;
    const { media } = event.data as { media: { id: number } };
    const record = await ctx.media.findAnyById(media.id);
    if (!record || record.deletingAt || record.scanStatus !== 'pending') return;
    await ctx.scans.queue(record, event.id);
    ctx.log.debug({ mediaId: record.id, key: record.key }, 'scan queued');
  },
};
