/** The media record as the API shows it (DESIGN.md section 3, "Records"). */
import type { MediaRecord } from '@shared/repositories/media.repository';

export interface MediaView {
  id: number;
  organizationId: number;
  folderId: number | null;
  name: string;
  key: string;
  url: string;
  mimetype: string;
  /** Kilobytes as a decimal (bytes / 1024), rounded to two places. */
  size: number;
  bytes: number;
  checksum: string;
  createdAt: string;
  updatedAt: string;
}

export function downloadUrl(publicBaseUrl: string, key: string): string {
  return `${publicBaseUrl}/media/download?media=${encodeURIComponent(key)}`;
}

export function toMediaView(record: MediaRecord, publicBaseUrl: string): MediaView {
  return {
    id: record.id,
    organizationId: record.organizationId,
    folderId: record.folderId,
    name: record.name,
    key: record.key,
    url: downloadUrl(publicBaseUrl, record.key),
    mimetype: record.mimetype,
    size: Math.round((record.bytes / 1024) * 100) / 100,
    bytes: record.bytes,
    checksum: record.checksum,
    createdAt: record.createdAt.toISOString(),
    updatedAt: record.updatedAt.toISOString(),
  };
}
