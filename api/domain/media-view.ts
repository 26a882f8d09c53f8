/**
 * The media record as the API shows it: every field of the interface's media
 * record (docs/api.md, "Records"), plus `bytes` and `checksum`.
 * `folderId` is shown only where the interface lists it (base64 upload,
 * convert, merge-pdfs), never in the answers of upload and upload/multiple.
 * `thumbhash`, an image's placeholder, is an extra field, present once the
 * worker has set it (worker/listeners/thumbhash.listener.ts).
 */
import type { MediaRecord, RequestOrigin } from '@shared/repositories/media.repository';

export interface MediaView {
  id: number;
  organizationId: number;
  folderId?: number | null;
  name: string;
  url: string;
  key: string;
  bucket: string;
  mimetype: string;
  /** Kilobytes as a decimal (bytes / 1024), rounded to two places. */
  size: number;
  bytes: number;
  checksum: string;
  metaData: RequestOrigin;
  /** An image's ThumbHash (base64), once computed. */
  thumbhash?: string;
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

export function toMediaView(
  record: MediaRecord,
  settings: ViewSettings,
  options: { folderId: boolean },
): MediaView {
  return {
    id: record.id,
    organizationId: record.organizationId,
    ...(options.folderId ? { folderId: record.folderId } : {}),
    name: record.name,
    url: downloadUrl(settings.publicBaseUrl, record.key),
    key: record.key,
    bucket: settings.bucket,
    mimetype: record.mimetype,
    size: Math.round((record.bytes / 1024) * 100) / 100,
    bytes: record.bytes,
    checksum: record.checksum,
    metaData: { ipAddress: record.metaData.ipAddress, userAgent: record.metaData.userAgent },
    ...(record.thumbhash ? { thumbhash: record.thumbhash } : {}),
    createdAt: record.createdAt.toISOString(),
    updatedAt: record.updatedAt.toISOString(),
  };
}
