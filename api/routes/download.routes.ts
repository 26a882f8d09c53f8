/**
 * GET /media/download?media=<key>: streams the object of a record of the
 * caller's organization, with Content-Type, Content-Length, ETag (the content
 * hash), Last-Modified, Content-Disposition (the record's name, safe for any
 * characters); `Range` gives 206 (416 when unsatisfiable) and a matching
 * `If-None-Match` gives 304 (http/stored-bytes.ts; without reading the record
 * when this process has served the key: api/domain/revalidation-cache.ts).
 * `disposition=inline` shows images and PDFs in the browser (PDFs sandboxed
 * by a Content-Security-Policy); a signed URL's answer may be cached
 * publicly until it expires (middleware/signed-url.ts).
 */
import { Router } from 'express';
import { create as contentDisposition } from 'content-disposition';
import { z } from 'zod';
import type { ApiMetrics } from '@shared/metrics';
import { sendNotModified, sendStoredBytes } from '../http/stored-bytes';
import { cacheControlFor } from '../middleware/signed-url';
import { fileValidators, type DownloadService } from '../services/download.service';
import { RouteTable, type RouteGuards } from './route-table';

/**
 * What an inline PDF may do: nothing. `sandbox` gives the document an opaque
 * origin with scripts, forms and popups off; `default-src 'none'` lets it
 * load nothing (the viewer draws the PDF's own bytes). docs/api.md.
 */
export const PDF_INLINE_CSP = "sandbox; default-src 'none'";

/** Types shown inline on request: images (never SVG, which is never stored) and PDFs. */
const showsInline = (mimetype: string) =>
  (mimetype.startsWith('image/') && mimetype !== 'image/svg+xml') || mimetype === 'application/pdf';

const MEDIA_REQUIRED = 'the media query parameter (a media key) is required';

/**
 * `media` (a key, once), then `disposition`: `attachment` (the default) or
 * `inline`; checked in that order (the first that is wrong is the 400).
 * Other parameters (a signed URL's) are no concern of the route's.
 */
const downloadQuery = z
  .looseObject({ media: z.string({ error: MEDIA_REQUIRED }).min(1, MEDIA_REQUIRED) })
  .pipe(
    z.object({
      media: z.string(),
      disposition: z
        .enum(['inline', 'attachment'], { error: 'disposition must be inline or attachment' })
        .default('attachment'),
    }),
  );

/** What every answer carries (a 304 too): ETag, Last-Modified, Cache-Control. */
const validatorsOf = (
  { etag, lastModified }: { etag: string; lastModified: string },
  signedUntil: Date | undefined,
) => ({
  etag,
  validators: { 'Last-Modified': lastModified, 'Cache-Control': cacheControlFor(signedUntil) },
});

export function downloadRoutes(deps: {
  downloads: DownloadService;
  /** Counts the bytes sent (media_bytes_served_total). */
  metrics?: Pick<ApiMetrics, 'bytesServed'>;
  guards: RouteGuards;
}): Router {
  const routes = new RouteTable(Router(), deps.guards);

  routes.get(
    '/media/download',
    { scope: 'read', query: downloadQuery },
    async ({ caller, query, req }, res) => {
      // A revalidation of a key this process has served: 304 without reading the record.
      const known = deps.downloads.known(caller, { key: query.media });
      if (known && sendNotModified(req, res, validatorsOf(known, caller.signedUntil))) return;
      // A plain GET (no range, no validator) will want the whole object: its read starts now,
      // beside the record's lookup, and its bytes go out only once the record allows them.
      const plain = req.method === 'GET' && !req.headers.range && !req.headers['if-none-match'];
      const early = plain ? deps.downloads.prefetch(caller, query.media) : undefined;
      try {
        const record = await deps.downloads.find(caller, { key: query.media });
        const inline = query.disposition === 'inline' && showsInline(record.mimetype);
        await sendStoredBytes(
          req,
          res,
          {
            ...validatorsOf(fileValidators(record), caller.signedUntil),
            length: record.bytes,
            contentType: record.mimetype,
            disposition: contentDisposition(record.name, {
              type: inline ? 'inline' : 'attachment',
            }),
            headers:
              inline && record.mimetype === 'application/pdf'
                ? { 'Content-Security-Policy': PDF_INLINE_CSP }
                : {},
            open: (range) =>
              range === undefined && early ? early.take() : deps.downloads.open(record, range),
            interrupted: { message: 'download interrupted', key: query.media },
          },
          deps.metrics,
        );
      } finally {
        early?.discard();
      }
    },
  );

  return routes.router;
}
