/**
 * A direct upload's completion on a worker (worker/services/direct-completion.service.ts)
 * over the real file-system store, its other collaborators in memory: what is
 * checked is what is kept. The quarantine key stays writable by the client
 * (its presigned PUT or POST is valid until the upload expires), so the store
 * here lets the "client" write it again right after the worker's first read of
 * it: the record, if any, must describe the final object's bytes, and a
 * refusal must leave no final object.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { isAppError } from '@shared/errors';
import type { MediaRecord } from '@shared/repositories/media.repository';
import type { Organization } from '@shared/repositories/organizations.repository';
import type { ByteRange, ObjectStore } from '@shared/storage/object-store';
import { FsObjectStore } from '@shared/storage/fs-object-store';
import { quarantineKey, type DirectUploadState } from '@shared/uploads/direct-uploads';
import { DirectCompletionService } from '../../worker/services/direct-completion.service';

const JPEG = readFileSync(join(__dirname, '../fixtures/Canon_40D.jpg'));
const PDF = readFileSync(join(__dirname, '../fixtures/minimal-document.pdf'));
const org: Organization = { id: 7, slug: 'acme', name: 'Acme', quotaBytes: null, rootFolderId: 1 };

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'direct-completion-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

async function bytesOf(store: ObjectStore, key: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of await store.get(key)) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

async function keysOf(store: ObjectStore): Promise<string[]> {
  const keys: string[] = [];
  for await (const o of store.list('')) keys.push(o.key);
  return keys.sort();
}

/**
 * Completes an upload of `declared` whose quarantine key the client writes
 * again with `rewrite` once the worker has first read it (none: never).
 */
async function complete(declared: Buffer, rewrite?: Buffer) {
  const fs = new FsObjectStore({ root: dir });
  await fs.init();
  const key = quarantineKey(org.slug, 'u1');
  await fs.put(key, declared, { contentType: 'image/jpeg' });
  let rewritten = false;
  const store = new Proxy(fs, {
    get(target, name, receiver) {
      if (name !== 'get') return Reflect.get(target, name, receiver) as unknown;
      return async (k: string, range?: ByteRange): Promise<Readable> => {
        const stream = await target.get(k, range);
        if (k === key && rewrite && !rewritten) {
          rewritten = true;
          const chunks: Buffer[] = [];
          for await (const chunk of stream) chunks.push(chunk as Buffer);
          await target.put(key, rewrite, { contentType: 'application/octet-stream' });
          return Readable.from([Buffer.concat(chunks)]);
        }
        return stream;
      };
    },
  });
  const state: DirectUploadState = {
    id: 'u1',
    organizationId: org.id,
    key,
    name: 'photo.jpg',
    bytes: declared.length,
    contentType: 'image/jpeg',
    method: 'put',
    mediaId: 41,
    bookingUntil: Date.now() + 60_000,
    createdAt: Date.now(),
    expiresAt: Date.now() + 60_000,
  };
  const recorded: MediaRecord[] = [];
  const service = new DirectCompletionService({
    store,
    uploads: {
      ready: () => Promise.resolve(undefined),
      get: () => Promise.resolve(state),
      completed: () => Promise.resolve(undefined),
    },
    creation: {
      commit: (_org, files) => {
        const made = files.map(
          ({ record }) => ({ ...record, id: state.mediaId }) as unknown as MediaRecord,
        );
        recorded.push(...made);
        return Promise.resolve(made);
      },
    },
    media: { findById: () => Promise.resolve(null) },
    folders: { findById: () => Promise.resolve(null) },
    limits: { acceptedTypes: ['image/jpeg', 'application/pdf'] },
  });
  const outcome = await service
    .complete({ id: 'upload.complete-direct-1', signal: new AbortController().signal }, org, {
      organizationId: org.id,
      requestId: 'r',
      origin: { ipAddress: '127.0.0.1', userAgent: 'test' },
      tokenId: 't',
      uploadId: 'u1',
      bytes: declared.length,
      folderId: null,
      onDuplicate: 'allow',
    })
    .then(
      (record) => ({ record }),
      (err: unknown) => ({ err }),
    );
  return { store: fs, key, outcome, recorded };
}

it('records the bytes it read, copied to the final key', async () => {
  const { store, outcome } = await complete(JPEG);
  if (!('record' in outcome)) throw outcome.err;
  const { record } = outcome;
  expect(record).toMatchObject({ mimetype: 'image/jpeg', bytes: JPEG.length });
  expect(record.key).toMatch(/^acme\/photo-[A-Za-z0-9_-]+\.jpg$/);
  const stored = await bytesOf(store, record.key);
  expect(stored.equals(JPEG)).toBe(true);
  expect(record.checksum).toBe(`sha256:${createHash('sha256').update(JPEG).digest('hex')}`);
  // The quarantine is emptied once the record is written.
  expect(await keysOf(store)).toEqual([record.key]);
});

it('never records bytes other than the stored ones when the client writes the quarantine key again', async () => {
  // A PDF of another size sent to the same presigned URL after the worker's first read.
  const { store, key, outcome, recorded } = await complete(JPEG, PDF);
  expect(recorded).toEqual([]);
  expect('err' in outcome && isAppError(outcome.err) ? outcome.err.code : outcome).toBe(
    'SIZE_MISMATCH',
  );
  // No final object is left behind: only the quarantine key, which the API then discards.
  expect(await keysOf(store)).toEqual([key]);
});

it('refuses a type that is not accepted from the first bytes, before anything is copied', async () => {
  // A TIFF, which this test's deployment does not accept.
  const tiff = readFileSync(join(__dirname, '../fixtures/tiff-BSG1.tiff'));
  const { store, key, outcome } = await complete(tiff);
  expect('err' in outcome && isAppError(outcome.err) ? outcome.err.status : outcome).toBe(415);
  expect(await keysOf(store)).toEqual([key]);
});
