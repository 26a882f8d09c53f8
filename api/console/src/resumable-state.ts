/**
 * Resumable uploads this tab started and did not finish, as tus-js-client
 * keeps them (upload.ts's URL storage, in sessionStorage): read here without
 * loading the upload chunk, so the files view can list them after a reload
 * ("choose the same file again to continue") and discard one.
 */
export const RESUMABLE_PREFIX = 'media-console-tus::';

export interface Interrupted {
  storageKey: string;
  name: string;
  size: number | null;
  uploadUrl: string;
}

export function interruptedUploads(): Interrupted[] {
  const out: Interrupted[] = [];
  try {
    for (let i = 0; i < sessionStorage.length; i++) {
      const key = sessionStorage.key(i);
      if (!key?.startsWith(RESUMABLE_PREFIX)) continue;
      const entry = JSON.parse(sessionStorage.getItem(key) ?? '') as {
        size?: number | null;
        metadata?: Record<string, string>;
        uploadUrl?: string | null;
      };
      if (!entry.uploadUrl) continue;
      out.push({
        storageKey: key,
        name: entry.metadata?.filename ?? entry.metadata?.name ?? 'file',
        size: entry.size ?? null,
        uploadUrl: entry.uploadUrl,
      });
    }
  } catch {
    /* storage unavailable or an entry malformed: nothing listed */
  }
  return out;
}

export function forgetInterrupted(storageKey: string): void {
  try {
    sessionStorage.removeItem(storageKey);
  } catch {
    /* storage unavailable */
  }
}
