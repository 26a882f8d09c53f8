/**
 * GET /media/download?media=<key>: streams the object of a record of the
 * caller's organization, with Content-Type, Content-Length, ETag (the content
 * hash), Last-Modified, Content-Disposition (the record's name, safe for any
 * characters); `Range` gives 206 (416 when unsatisfiable) and a matching
 * `If-None-Match` gives 304. `disposition=inline` shows images and PDFs in
 * the browser (PDFs sandboxed by a Content-Security-Policy); a signed URL's
 * answer may be cached publicly until it expires (middleware/signed-url.ts).
 */
import { Router, type Request, type Response } from 'express';
import { create as contentDisposition } from 'content-disposition';
import { pipeline } from 'node:stream/promises';
import { Errors } from '@shared/errors';
import type { ApiMetrics } from '@shared/metrics';
import type { MediaRecord } from '@shared/repositories/media.repository';
import { principalOf } from '../middleware/auth';
import { cacheControlFor } from '../middleware/signed-url';
import type { DownloadService } from '../services/download.service';
import { noneMatch, requestedRange } from '../http/byte-ranges';
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

/** `disposition` (optional): `attachment` (the default) or `inline`. */
function dispositionOf(req: Request): 'inline' | 'attachment' {
  const value = req.query.disposition;
  if (value === undefined || value === 'attachment') return 'attachment';
  if (value === 'inline') return 'inline';
  throw Errors.validation([
    { field: 'disposition', message: 'disposition must be inline or attachment' },
  ]);
}

const etagOf = (record: MediaRecord) => `"${record.checksum.replace(/^sha256:/, '')}"`;

export function downloadRoutes(deps: {
  downloads: DownloadService;
  /** Counts the bytes sent (media_bytes_served_total). */
  metrics?: Pick<ApiMetrics, 'bytesServed'>;
  guards: RouteGuards;
}): Router {
  const routes = new RouteTable(Router(), deps.guards);

  routes.get('/media/download', { scope: 'read' }, async (req: Request, res: Response) => {
    const org = principalOf(req).organization;
    const key = req.query.media;
    if (typeof key !== 'string' || key === '') {
      throw Errors.validation([
        { field: 'media', message: 'the media query parameter (a media key) is required' },
      ]);
    }
    const disposition = dispositionOf(req);
    const record = await deps.downloads.find(org.id, key);
    const etag = etagOf(record);
    res.setHeader('ETag', etag);
    res.setHeader('Last-Modified', record.updatedAt.toUTCString());
    res.setHeader('Cache-Control', cacheControlFor(req));
    res.setHeader('Accept-Ranges', 'bytes');
    if (noneMatch(req.headers['if-none-match'], etag)) {
      res.status(304).end();
      return;
    }
    const range = requestedRange(req, record.bytes, etag);
    if (range === 'unsatisfiable') {
      throw Errors.rangeNotSatisfiable(record.bytes);
    }
    const body =
      req.method === 'HEAD' ? undefined : await deps.downloads.open(record, range ?? undefined);
    res.setHeader('Content-Type', record.mimetype);
    const inline = disposition === 'inline' && showsInline(record.mimetype);
    res.setHeader(
      'Content-Disposition',
      contentDisposition(record.name, { type: inline ? 'inline' : 'attachment' }),
    );
    res.setHeader('X-Content-Type-Options', 'nosniff');
    if (inline && record.mimetype === 'application/pdf') {
      res.setHeader('Content-Security-Policy', PDF_INLINE_CSP);
    }
    if (range) {
      res.status(206);
      res.setHeader('Content-Range', `bytes ${range.start}-${range.end}/${record.bytes}`);
      res.setHeader('Content-Length', String(range.end - range.start + 1));
    } else {
      res.status(200);
      res.setHeader('Content-Length', String(record.bytes));
    }
    if (!body) {
      res.end();
      return;
    }
    let sent = 0;
    body.on('data', (chunk: Buffer) => (sent += chunk.length));
    try {
      await pipeline(body, res);
    } catch (err) {
      // Headers are gone; the error handler can only cut the connection.
      req.log.warn({ err, key }, 'download interrupted');
      res.destroy();
    } finally {
      deps.metrics?.bytesServed(sent);
    }
  });

  return routes.router;
}
