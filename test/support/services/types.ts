/** What each service resolver returns to the global setup. */
export interface ResolvedService<T> {
  value: T;
  /** One human line: which backend was chosen and where it listens. */
  backend: string;
  /** Tears down whatever the resolver started (a no-op for external services). */
  stop: () => Promise<void>;
}

export interface S3Endpoint {
  endpoint: string;
  region: string;
  accessKey: string;
  secretKey: string;
}
