/**
 * An ObjectStore seen from outside: each call is timed for the dependency
 * metrics (`media_dependency_duration_seconds{dependency="storage"}`, and
 * `media_dependency_errors_total` when storage failed) and is a client span
 * `storage <operation>` when tracing is on (a no-op span otherwise: the
 * OpenTelemetry API without an SDK does nothing). Both processes wrap the store
 * they build with it, so every storage call of a request or a job is counted
 * and traced whatever the backend (S3 or the file system).
 *
 * Not a storage failure: an answer (a missing object, 404) and a put whose
 * body failed (the client went away, a size limit tripped).
 *
 * `get` is timed until the object's stream is open (the store answered), not
 * until the caller has read it; `list` and `incompleteUploads` (reconciliation
 * only) pass through untimed.
 */
import { SpanKind, SpanStatusCode, trace, type Attributes } from '@opentelemetry/api';
import { isAppError } from '../errors';
import type { DependencyMetrics } from '../metrics';
import type { ObjectStore } from './object-store';

const tracer = trace.getTracer('media-storage-service/storage');

/** Whether a failed call means storage failed (not one of its answers). */
function storageFailed(err: unknown): boolean {
  return !(isAppError(err) && err.status < 500);
}

export function observeObjectStore(
  store: ObjectStore,
  metrics: DependencyMetrics | undefined,
): ObjectStore {
  const call = <T>(
    operation: string,
    attributes: Attributes,
    fn: () => Promise<T>,
    failed: (err: unknown) => boolean = storageFailed,
  ): Promise<T> =>
    tracer.startActiveSpan(
      `storage ${operation}`,
      {
        kind: SpanKind.CLIENT,
        attributes: { 'media.storage.operation': operation, ...attributes },
      },
      async (span) => {
        const started = performance.now();
        const seconds = () => (performance.now() - started) / 1000;
        try {
          const result = await fn();
          metrics?.observeDependency('storage', operation, seconds(), true);
          return result;
        } catch (err) {
          const isFailure = failed(err);
          metrics?.observeDependency('storage', operation, seconds(), !isFailure);
          if (isFailure) {
            span.recordException(err instanceof Error ? err : new Error(String(err)));
            span.setStatus({ code: SpanStatusCode.ERROR });
          }
          throw err;
        } finally {
          span.end();
        }
      },
    );
  const keyed = (key: string): Attributes => ({ 'media.storage.key': key });

  return {
    get description() {
      return store.description;
    },
    address: (key) => store.address(key),
    presigned: store.presigned,
    init: () => call('init', {}, () => store.init()),
    ping: () => call('ping', {}, () => store.ping()),
    put(key, body, options) {
      let bodyFailed = false;
      if (!Buffer.isBuffer(body)) body.once('error', () => (bodyFailed = true));
      return call(
        'put',
        keyed(key),
        () => store.put(key, body, options),
        (err) => !bodyFailed && storageFailed(err),
      );
    },
    get: (key, range) => call('get', keyed(key), () => store.get(key, range)),
    stat: (key) => call('stat', keyed(key), () => store.stat(key)),
    copy: (from, to) =>
      call('copy', { 'media.storage.key': to, 'media.storage.source_key': from }, () =>
        store.copy(from, to),
      ),
    remove: (key) => call('remove', keyed(key), () => store.remove(key)),
    removeMany: (keys) =>
      call('removeMany', { 'media.storage.keys': keys.length }, () => store.removeMany(keys)),
    list: (prefix) => store.list(prefix),
    listIncompleteUploads: (prefix) =>
      call('listIncompleteUploads', {}, () => store.listIncompleteUploads(prefix)),
    incompleteUploads: (prefix) => store.incompleteUploads(prefix),
    abortIncompleteUpload: (upload) =>
      call('abortIncompleteUpload', keyed(upload.key), () => store.abortIncompleteUpload(upload)),
    multipart: {
      create: (key, contentType) =>
        call('createMultipart', keyed(key), () => store.multipart.create(key, contentType)),
      putPart: (key, uploadId, part, data) =>
        call('putPart', keyed(key), () => store.multipart.putPart(key, uploadId, part, data)),
      ...(store.multipart.streamPart
        ? {
            streamPart: (key, uploadId, part, size, body, bytes) => {
              // Its body stopped by the caller (the client went away): not a storage failure.
              let bodyFailed = false;
              body.once('error', () => (bodyFailed = true));
              return call(
                'streamPart',
                keyed(key),
                () => store.multipart.streamPart!(key, uploadId, part, size, body, bytes),
                (err) => !bodyFailed && storageFailed(err),
              );
            },
          }
        : {}),
      copyPart: (key, uploadId, part, source) =>
        call('copyPart', { 'media.storage.key': key, 'media.storage.source_key': source }, () =>
          store.multipart.copyPart(key, uploadId, part, source),
        ),
      complete: (key, uploadId, parts) =>
        call('completeMultipart', keyed(key), () => store.multipart.complete(key, uploadId, parts)),
      parts: (key, uploadId) =>
        call('listParts', keyed(key), () => store.multipart.parts(key, uploadId)),
      abort: (key, uploadId) =>
        call('abortMultipart', keyed(key), () => store.multipart.abort(key, uploadId)),
    },
  };
}
