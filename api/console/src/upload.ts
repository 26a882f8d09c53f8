/**
 * Uploads, with Uppy and its tus plugin (@uppy/tus, tus-js-client): loaded
 * only when a person uploads (its own chunk, not counted in the first-load
 * budget). Each file is a resumable upload at /media/upload/resumable
 * (docs/resumable-uploads.md), sent in 8 MiB PATCHes:
 *
 * - progress per file, pause and resume (Uppy's pauseResume);
 * - a dropped network: tus-js-client asks the upload's offset (HEAD) and
 *   sends the rest, retried for about a minute; after that the file shows
 *   "Retry", which resumes at the offset too;
 * - a page reload: the upload's URL is kept under the file's fingerprint
 *   (name, type, size, last modified, folder) in sessionStorage (this tab
 *   only, like the token; never the token itself), so choosing or dropping the
 *   same file again resumes where it stopped;
 * - a refused file (type 415, size or quota 413, too many unfinished 429)
 *   shows the API's own message, and is never retried.
 */
import Uppy, { type Meta, type UppyFile } from '@uppy/core';
import Tus from '@uppy/tus';
import type { DetailedError, PreviousUpload, UrlStorage } from 'tus-js-client';
import { RESUMABLE_PREFIX } from './resumable-state';

/** What the files view shows of one upload. */
export interface UploadRow {
  id: string;
  name: string;
  /** 0..100 */
  percent: number;
  state: 'waiting' | 'uploading' | 'paused' | 'retrying' | 'uploaded' | 'refused' | 'failed';
  message?: string;
}

export interface Uploader {
  add(files: File[], folderId: number | undefined): Promise<void>;
  pauseResume(id: string): void;
  retry(id: string): void;
  destroy(): void;
}

type FileMeta = Meta & { folderId?: string };
type ResponseBody = Record<string, unknown>;
type File_ = UppyFile<FileMeta, ResponseBody>;

const CHUNK = 8 * 1024 * 1024;
/** About a minute of a dropped network, retried on its own (then "Retry"). */
const RETRY_DELAYS = [0, 1000, 3000, 5000, 10_000, 20_000, 30_000];

/**
 * tus-js-client's URL storage, in sessionStorage rather than its default
 * localStorage: an upload resumes after a reload of this tab, and nothing of
 * it outlives the tab (the same lifetime as the token).
 */
class SessionUrlStorage implements UrlStorage {
  private entries(prefix: string): PreviousUpload[] {
    const out: PreviousUpload[] = [];
    for (let i = 0; i < sessionStorage.length; i++) {
      const key = sessionStorage.key(i);
      if (!key?.startsWith(prefix)) continue;
      try {
        out.push({
          ...(JSON.parse(sessionStorage.getItem(key) ?? '') as PreviousUpload),
          urlStorageKey: key,
        });
      } catch {
        /* a malformed entry never blocks an upload */
      }
    }
    return out;
  }
  findAllUploads(): Promise<PreviousUpload[]> {
    return Promise.resolve(this.entries(RESUMABLE_PREFIX));
  }
  findUploadsByFingerprint(fingerprint: string): Promise<PreviousUpload[]> {
    return Promise.resolve(this.entries(`${RESUMABLE_PREFIX}${fingerprint}::`));
  }
  removeUpload(urlStorageKey: string): Promise<void> {
    sessionStorage.removeItem(urlStorageKey);
    return Promise.resolve();
  }
  addUpload(fingerprint: string, upload: PreviousUpload): Promise<string> {
    const key = `${RESUMABLE_PREFIX}${fingerprint}::${Date.now()}`;
    sessionStorage.setItem(key, JSON.stringify(upload));
    return Promise.resolve(key);
  }
}

/** The API's message from a refused request's answer (its error envelope), else a status line. */
function messageOf(err: Error): { refused: boolean; message: string } {
  const res = (err as Partial<DetailedError>).originalResponse;
  const status = res?.getStatus();
  if (!res || !status) return { refused: false, message: 'the network failed' };
  try {
    const body = JSON.parse(res.getBody()) as { message?: string; error?: string };
    if (body.message) {
      const message = body.error ? `${body.message} (${body.error})` : body.message;
      return { refused: status < 500, message };
    }
  } catch {
    /* not JSON */
  }
  return { refused: status < 500, message: `HTTP ${status}` };
}

/** A refusal is an answer, not network trouble: never retried (409 and 423 are, per tus). */
const isRefusal = (status: number | undefined) =>
  status !== undefined && status >= 400 && status < 500 && status !== 409 && status !== 423;

export function createUploader(
  token: () => string,
  onChange: (rows: UploadRow[]) => void,
  onUploaded: () => void,
): Uploader {
  const rows = new Map<string, UploadRow>();
  const show = (id: string, patch: Partial<UploadRow>) => {
    const row = rows.get(id);
    if (!row) return;
    rows.set(id, { ...row, ...patch });
    onChange([...rows.values()]);
  };
  // One Uppy per folder: its id is in the files' ids, so in their tus
  // fingerprints, and the same file resumes into the folder it was started in.
  const instances = new Map<string, Uppy<FileMeta, ResponseBody>>();
  const owner = new Map<string, Uppy<FileMeta, ResponseBody>>();

  const instance = (folderId: number | undefined) => {
    const id = `console-folder-${folderId ?? 'root'}`;
    let uppy = instances.get(id);
    if (uppy) return uppy;
    uppy = new Uppy<FileMeta, ResponseBody>({
      id,
      autoProceed: true,
      allowMultipleUploadBatches: true,
    });
    uppy.use(Tus, {
      endpoint: `${location.origin}/media/upload/resumable`,
      // Read at each upload's start: a new sign-in's token is used from then on.
      headers: () => ({ Authorization: `Bearer ${token()}` }),
      chunkSize: CHUNK,
      limit: 3,
      retryDelays: RETRY_DELAYS,
      removeFingerprintOnSuccess: true,
      urlStorage: new SessionUrlStorage(),
      // The keys Uppy sends as `filename`/`filetype`, and the folder when there is one.
      allowedMetaFields: folderId === undefined ? ['name', 'type'] : ['name', 'type', 'folderId'],
      onShouldRetry(err, _attempt, _options, next) {
        if (isRefusal(err.originalResponse?.getStatus())) return false;
        const again = next(err);
        // The file whose upload URL the failed request went to.
        const url = err.originalRequest?.getURL();
        const file = uppy.getFiles().find((f: File_) => f.tus?.uploadUrl === url);
        if (again && file)
          show(file.id, { state: 'retrying', message: 'connection lost: retrying' });
        return again;
      },
    });
    uppy.on('upload-progress', (file, progress) => {
      if (!file) return;
      const total = progress.bytesTotal ?? 0;
      show(file.id, {
        state: file.isPaused ? 'paused' : 'uploading',
        percent: total > 0 ? Math.floor((progress.bytesUploaded / total) * 100) : 0,
        message: undefined,
      });
    });
    uppy.on('upload-error', (file, error) => {
      if (!file) return;
      const { refused, message } = messageOf(error);
      show(file.id, { state: refused ? 'refused' : 'failed', message });
    });
    uppy.on('upload-success', (file) => {
      if (!file) return;
      show(file.id, { state: 'uploaded', percent: 100, message: undefined });
      onUploaded();
    });
    uppy.on('upload-pause', (file, isPaused) => {
      if (file) show(file.id, { state: isPaused ? 'paused' : 'uploading', message: undefined });
    });
    instances.set(id, uppy);
    return uppy;
  };

  return {
    async add(files, folderId) {
      const uppy = instance(folderId);
      for (const file of files) {
        const meta: FileMeta = folderId === undefined ? {} : { folderId: String(folderId) };
        let id: string;
        try {
          // A file added again (after a reload, or a failure) replaces its row.
          id = uppy.addFile({ name: file.name, type: file.type, data: file, meta });
        } catch (err) {
          const existing = uppy.getFiles().find((f: File_) => f.name === file.name);
          if (existing) {
            uppy.removeFile(existing.id);
            rows.delete(existing.id);
            id = uppy.addFile({ name: file.name, type: file.type, data: file, meta });
          } else {
            const rowId = `refused-${file.name}-${Date.now()}`;
            rows.set(rowId, {
              id: rowId,
              name: file.name,
              percent: 0,
              state: 'refused',
              message: (err as Error).message,
            });
            onChange([...rows.values()]);
            continue;
          }
        }
        owner.set(id, uppy);
        rows.set(id, { id, name: file.name, percent: 0, state: 'waiting' });
        onChange([...rows.values()]);
      }
      await Promise.resolve();
    },
    pauseResume(id) {
      owner.get(id)?.pauseResume(id);
    },
    retry(id) {
      const uppy = owner.get(id);
      if (!uppy) return;
      show(id, { state: 'uploading', message: undefined });
      void uppy.retryUpload(id);
    },
    destroy() {
      for (const uppy of instances.values()) uppy.destroy();
      instances.clear();
    },
  };
}
