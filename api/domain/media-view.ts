/**
 * The media record as the API shows it: every field of the interface's media
 * record (docs/api.md, "Records"), plus `bytes` and `checksum` (and a PDF's
 * `pages`, once known).
 * `folderId` is shown only where the interface lists it (base64 upload,
 * convert, merge-pdfs; and the listing and record reads), never in the
 * answers of upload and upload/multiple; always an integer: a file in no
 * folder answers its organization's root folder id.
 * `scanStatus` is shown when the record has one (stored while malware
 * scanning was on: docs/api.md, "Malware scanning").
 * `thumbhash`, an image's placeholder, is an extra field, present once the
 * worker has set it (worker/listeners/thumbhash.listener.ts). `sourceUrl`,
 * a URL import's source, is an extra field of imported records.
 */
import type { MediaRecord, RequestOrigin } from '@shared/repositories/media.repository';
import type { ScanStatus } from '@shared/scan/scan';

export interface MediaView {
  id: number;
  organizationId: number;
  folderId?: number;
  name: string;
  url: string;
  key: string;
  bucket: string;
  mimetype: string;
  /** Kilobytes as a decimal (bytes / 1024), rounded to two places. */
  size: number;
  bytes: number;
  checksum: string;
  /** A PDF's page count, once the worker has read it (an extra field). */
  pages?: number;
  metaData: RequestOrigin;
  /** pending, clean, infected or unscanned; absent when the file was stored while scanning was off. */
  scanStatus?: ScanStatus;
  /** An image's ThumbHash (base64), once computed. */
  thumbhash?: string;
  /** Where a URL import fetched it from (an extra field; userinfo, query and fragment removed). */
  sourceUrl?: string;
  createdAt: string;
  updatedAt: string;
}

/** What every view needs from the configuration. */
export interface ViewSettings {
  publicBaseUrl: string;
  /** The storage container's name (S3_BUCKET, also with the file-system store). */
  bucket: string;
}

/** `<host>/media/download?media=<key>`, the key as it is (keys only hold `[A-Za-z0-9._/-]`). */
export function downloadUrl(publicBaseUrl: string, key: string): string {
  return `${publicBaseUrl}/media/download?media=${key}`;
}

/**
 * How a read shows records to `caller`: with `folderId`, a file in no folder
 * answering the organization's root folder's id.
 */
export function viewsFor(views: ViewSettings) {
  return ({ organization }: { organization: { rootFolderId: number } }) =>
    (record: Parameters<typeof toMediaView>[0]): MediaView =>
      toMediaView(record, views, { folderId: true, rootFolderId: organization.rootFolderId });
}

export function toMediaView(
  record: MediaRecord,
  settings: ViewSettings,
  /** Whether folderId is shown; when it is, the root folder id that a file in no folder answers. */
  options: { folderId: false } | { folderId: true; rootFolderId: number },
): MediaView {
  return {
    id: record.id,
    organizationId: record.organizationId,
    ...(options.folderId ? { folderId: record.folderId ?? options.rootFolderId } : {}),
    name: record.name,
    url: downloadUrl(settings.publicBaseUrl, record.key),
    key: record.key,
    bucket: settings.bucket,
    mimetype: record.mimetype,
    size: Math.round((record.bytes / 1024) * 100) / 100,
    bytes: record.bytes,
    checksum: record.checksum,
    ...(record.pages !== undefined ? { pages: record.pages } : {}),
    metaData: { ipAddress: record.metaData.ipAddress, userAgent: record.metaData.userAgent },
    ...(record.scanStatus ? { scanStatus: record.scanStatus } : {}),
    ...(record.thumbhash ? { thumbhash: record.thumbhash } : {}),
    ...(record.sourceUrl ? { sourceUrl: record.sourceUrl } : {}),
    createdAt: record.createdAt.toISOString(),
    updatedAt: record.updatedAt.toISOString(),
  };
}
