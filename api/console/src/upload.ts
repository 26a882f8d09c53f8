/**
 * Uploads, with Uppy: loaded only when a person uploads (its own chunk, not
 * counted in the first-load budget). Today each file is a multipart POST to
 * /media/upload (XHRUpload, field `file`, the folder as `folderId`, sent
 * before the file as the route wants). Resumable uploads (tus, at
 * /media/upload/resumable) plug in here alone: replace the `.use(XHRUpload,
 * …)` below by `.use(Tus, { endpoint: '/media/upload/resumable', headers })`
 * from @uppy/tus; the progress, error and completion events the console
 * listens to are Uppy's own and stay the same.
 */
import Uppy, { type Meta, type UppyFile } from '@uppy/core';
import XHRUpload from '@uppy/xhr-upload';

export interface UploadCallbacks {
  progress(name: string, percent: number): void;
  failed(name: string, message: string): void;
  done(name: string): void;
}

type FileMeta = Meta & { folderId?: string };
type ResponseBody = Record<string, unknown>;

/** The API's error message from a refused upload's answer (type, size, quota…). */
function messageOf(xhr: XMLHttpRequest): string {
  try {
    const body = JSON.parse(xhr.responseText) as { message?: string; error?: string };
    if (body.message) return body.error ? `${body.message} (${body.error})` : body.message;
  } catch {
    /* not JSON */
  }
  return `HTTP ${xhr.status}`;
}

export async function uploadFiles(
  files: File[],
  options: { token: string; folderId?: number | undefined },
  on: UploadCallbacks,
): Promise<void> {
  const uppy = new Uppy<FileMeta, ResponseBody>({
    autoProceed: false,
    allowMultipleUploadBatches: true,
  });
  uppy.use(XHRUpload, {
    endpoint: '/media/upload',
    fieldName: 'file',
    formData: true,
    limit: 3,
    // The folder only when there is one (an absent field, never the text `undefined`).
    allowedMetaFields: options.folderId === undefined ? [] : ['folderId'],
    headers: { Authorization: `Bearer ${options.token}` },
    // Refusals are answers, not network trouble: never retried.
    shouldRetry: () => false,
    onAfterResponse(xhr) {
      if (xhr.status >= 400) throw new Error(messageOf(xhr));
    },
  });
  const nameOf = (file: UppyFile<FileMeta, ResponseBody> | undefined) => file?.name ?? 'file';
  uppy.on('upload-progress', (file, progress) => {
    const total = progress.bytesTotal ?? 0;
    on.progress(nameOf(file), total > 0 ? Math.round((progress.bytesUploaded / total) * 100) : 0);
  });
  uppy.on('upload-error', (file, error) => on.failed(nameOf(file), error.message));
  uppy.on('upload-success', (file) => on.done(nameOf(file)));
  for (const file of files) {
    const meta: FileMeta =
      options.folderId === undefined ? {} : { folderId: String(options.folderId) };
    try {
      uppy.addFile({ name: file.name, type: file.type, data: file, meta });
    } catch (err) {
      on.failed(file.name, (err as Error).message);
    }
  }
  await uppy.upload();
  uppy.destroy();
}
