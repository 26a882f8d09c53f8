/**
 * The load test's vocabulary (bench/load.ts): its endpoints, options, what it
 * records of every attempt, and its result.
 */

export const ENDPOINTS = ['upload', 'download', 'metadata', 'convert'] as const;
export type Endpoint = (typeof ENDPOINTS)[number];

export interface SampleImage {
  /** File name (its extension is kept for the uploaded names). */
  name: string;
  data: Buffer;
}

export interface LoadOptions {
  /** Base URL of the API, e.g. http://127.0.0.1:3000. */
  url: string;
  /** A bearer token of the organization the load runs in. */
  token: string;
  durationMs: number;
  /** Concurrent clients (one connection each), split over the endpoints by `shares`. */
  connections: number;
  /** Relative share of the connections per endpoint (default: equal). */
  shares?: Record<Endpoint, number>;
  /** Images to upload (each is also uploaded once before the clock starts, as the first sources). */
  images: SampleImage[];
  /** Every n-th upload is a text file the API must refuse with 415 (0: never). Default 10. */
  refuseEvery?: number;
  /** Every n-th upload is `maxFileSize` + 1 MiB, refused with 413 (0: never). Default 40. */
  oversizeEvery?: number;
  /** The API's MAX_FILE_SIZE (needed when `oversizeEvery` > 0). */
  maxFileSize?: number;
  /** Target format of the conversions. Default webp. */
  convertFormat?: string;
  /** Per-request limit for headers and body (ms). Default 60 s (above JOB_WAIT_MS). */
  requestTimeoutMs?: number;
}

/** What the API returned for a stored file (the fields the checks use). */
export interface StoredMedia {
  id: number;
  key: string;
  name: string;
  mimetype: string;
  bytes: number;
  checksum: string;
  folderId: number | null;
}

export interface UploadAttempt {
  phase: 'seed' | 'load';
  /** The unique file name sent. */
  name: string;
  bytes: number;
  checksum: string;
  folder: { name: string; position: 'before' | 'after' } | null;
  /** What a correct service does with it. */
  expected: 'stored' | 'refused';
  /** HTTP status, or null when the request failed without one. */
  status: number | null;
  error?: string;
  stored?: StoredMedia;
}

export interface ConvertAttempt {
  source: string;
  status: number | null;
  error?: string;
  stored?: StoredMedia;
  /** The job id an error answer carried (a 504's job goes on and may still store its result). */
  jobId?: string;
}

export interface EndpointStats {
  requests: number;
  perSecond: number;
  latencyMs: { p50: number; p90: number; p99: number; max: number; mean: number };
  /** Count per HTTP status; `error` for requests that got none (connection error, timeout). */
  statuses: Record<string, number>;
}

export interface UnexpectedAnswer {
  endpoint: Endpoint;
  status: number | null;
  /** Start of the body, or the client-side error. */
  detail: string;
}

export interface LoadResult {
  options: { connections: number; durationMs: number };
  connections: Record<Endpoint, number>;
  /** From the first request to the last answer (the drain included). */
  elapsedMs: number;
  endpoints: Record<Endpoint, EndpointStats>;
  uploads: UploadAttempt[];
  conversions: ConvertAttempt[];
  /** Downloads whose bytes differ from the record (size or SHA-256). */
  downloadMismatches: string[];
  /** Answers other than the expected one (deliberate refusals excluded); the first 50. */
  unexpected: UnexpectedAnswer[];
  unexpectedCount: number;
}
