/**
 * The console's API client: openapi-fetch typed by the types generated from
 * api/openapi.yaml (generate-client.mjs), so a route or field that changes
 * there breaks the console's build. The token lives in memory and, unless the
 * person opts out, in sessionStorage (this tab only, gone when it closes):
 * never in a URL, never in localStorage or a cookie.
 */
import createClient, { type Middleware } from 'openapi-fetch';
import type { components, paths } from './generated/openapi';

export type MediaRecord = components['schemas']['MediaRecord'];
export type Folder = components['schemas']['Folder'];
export type RootFolder = components['schemas']['RootFolder'];
export type Usage = components['schemas']['Usage'];
export type WebhookEndpoint = components['schemas']['WebhookEndpoint'];
export type WebhookDelivery = components['schemas']['WebhookDelivery'];
export type ImageMetadata = components['schemas']['ImageMetadata'];
export type MediaSort = NonNullable<paths['/media']['get']['parameters']['query']>['sort'];

const TOKEN_KEY = 'media-console-token';
let token: string | null = null;

export function currentToken(): string | null {
  if (token === null) {
    try {
      token = sessionStorage.getItem(TOKEN_KEY);
    } catch {
      /* storage unavailable: memory only */
    }
  }
  return token;
}

export function setToken(value: string | null, remember: boolean): void {
  token = value;
  try {
    if (value && remember) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    /* storage unavailable: memory only */
  }
}

const auth: Middleware = {
  onRequest({ request }) {
    const t = currentToken();
    if (t) request.headers.set('Authorization', `Bearer ${t}`);
    return request;
  },
};

export const api = createClient<paths>({ baseUrl: location.origin });
api.use(auth);

/** The error envelope's message, or a status line. */
export function problem(error: unknown, response?: Response): string {
  const e = error as { message?: unknown; error?: unknown } | undefined;
  if (e && typeof e.message === 'string') {
    return typeof e.error === 'string' ? `${e.message} (${e.error})` : e.message;
  }
  return response ? `HTTP ${response.status}` : 'request failed';
}

/** What the token may do, found by asking (see docs/console.md: "What a token may do"). */
export interface Abilities {
  write: boolean;
  delete: boolean;
  webhooks: boolean;
}

/**
 * The API has no "who am I" route, so the console asks what a token may do
 * with requests that change nothing: a route checks the scope (403) before
 * its input (400), so an empty folder create and a delete without a key
 * answer 403 without the scope, 400 with it.
 */
export async function probeAbilities(): Promise<Abilities | 'unauthorized'> {
  const usage = await api.GET('/media/usage');
  if (usage.response.status === 401) return 'unauthorized';
  const [write, del, hooks] = await Promise.all([
    fetchStatus('/media/folders', { method: 'POST', json: {} }),
    fetchStatus('/media/record', { method: 'DELETE' }),
    api.GET('/media/webhooks').then((r) => r.response.status),
  ]);
  return { write: write === 400, delete: del === 400, webhooks: hooks === 200 };
}

/** A raw request (for the probes and the multipart forms openapi-fetch does not build). */
export async function fetchStatus(
  path: string,
  init: { method: string; json?: unknown; body?: FormData },
): Promise<number> {
  return (await rawFetch(path, init)).status;
}

export function rawFetch(
  path: string,
  init: { method: string; json?: unknown; body?: FormData; headers?: Record<string, string> },
): Promise<Response> {
  const headers = new Headers(init.headers);
  const t = currentToken();
  if (t) headers.set('Authorization', `Bearer ${t}`);
  if (init.json !== undefined) headers.set('Content-Type', 'application/json');
  return fetch(path, {
    method: init.method,
    headers,
    body: init.json !== undefined ? JSON.stringify(init.json) : init.body,
  });
}

/** The thumbnail render options: one variant per file, shared by the grid and the list. */
export const THUMB = { w: 240, h: 240, fit: 'cover', format: 'webp' } as const;

/** Signed render URLs for many keys in one request per 100 (the sign route's limit). */
export async function signRenders(
  keys: string[],
  render: Record<string, unknown>,
  expiresIn = 3600,
): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (let i = 0; i < keys.length; i += 100) {
    const { data } = await api.POST('/media/sign', {
      body: { mediaKeys: keys.slice(i, i + 100), expiresIn, render },
    });
    for (const u of data?.data.urls ?? []) out.set(u.mediaKey, u.url);
  }
  return out;
}

/** One signed download URL (the "copy signed URL" action). */
export async function signDownload(key: string, expiresIn: number): Promise<string> {
  const { data, error, response } = await api.POST('/media/sign', {
    body: { mediaKey: key, expiresIn, disposition: 'attachment' },
  });
  if (!data) throw new Error(problem(error, response));
  return data.data.urls[0]!.url;
}
