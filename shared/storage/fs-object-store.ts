/**
 * The object store on the local file system, for development without an S3
 * endpoint (see docs/storage.md). Layout under the root directory:
 *
 *   <root>/<key>                  the object's bytes (a key's "/" are directories)
 *   <root>/<key>.meta.json        sidecar: {"contentType": "..."}
 *   <root>/.tmp/<uuid>~<key b64>  a put in progress (or left by a crash)
 *   <root>/.tmp/<uuid>.<kind>     other temporary files (sidecars, copies, ping)
 *   <root>/.tmp/mpu-<uuid>/<n>    part n of a multipart upload (`multipart`)
 *
 * A put streams into a temporary file and renames it into place, so readers
 * see the old object or the whole new one, never a part; a failed put removes
 * its temporary file. Keys that would leave the root are refused.
 */
import { randomUUID } from 'node:crypto';
import { constants as fsConstants, createWriteStream, type Dirent } from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Errors, isAppError } from '../errors';
import type { Logger } from '../logger';
import type {
  ByteRange,
  IncompleteUpload,
  ListedObject,
  ObjectInfo,
  ObjectStore,
  MultipartUploads,
  PutOptions,
  PutResult,
} from './object-store';
import {
  codeOf,
  decodeKey,
  DEFAULT_CONTENT_TYPE,
  encodeKey,
  etagOf,
  isName,
  MAX_TEMP_NAME,
  META_SUFFIX,
  MISSING_CODES,
  SHAPE_CODES,
  TEMP_DIR,
  assertValidKey,
} from './fs-keys';

export interface FsStoreOptions {
  /** The directory objects live under (STORAGE_DIR); created by `init()`. */
  root: string;
  logger?: Logger;
  /** `init()` removes temporary files older than this (default one hour). */
  staleTempMs?: number;
  /** The bucket name addresses carry (S3_BUCKET; default `media`). */
  bucket?: string;
  /**
   * The store's endpoint as clients see it, without a trailing slash
   * (STORAGE_PUBLIC_ENDPOINT; default `file://`): addresses are
   * `<endpoint>/<bucket>/<key>`, never the server's path.
   */
  publicEndpoint?: string;
}

export class FsObjectStore implements ObjectStore {
  readonly description: string;
  readonly root: string;
  private readonly tempDir: string;
  private readonly staleTempMs: number;
  /** Puts in progress in this process: temporary path → key (for keys too long to encode). */
  private readonly inProgress = new Map<string, string>();

  constructor(private readonly options: FsStoreOptions) {
    this.root = path.resolve(options.root);
    this.tempDir = path.join(this.root, TEMP_DIR);
    this.staleTempMs = options.staleTempMs ?? 60 * 60 * 1000;
    this.description = `file system ${this.root}`;
  }

  address(key: string): string {
    assertValidKey(key);
    return `${this.options.publicEndpoint ?? 'file://'}/${this.options.bucket ?? 'media'}/${key}`;
  }

  /** The file of `key` (after validating it). */
  pathOf(key: string): string {
    assertValidKey(key);
    const file = path.resolve(this.root, ...key.split('/'));
    if (!file.startsWith(this.root + path.sep)) {
      throw new Error(`Invalid object key ${JSON.stringify(key)}: outside the store`);
    }
    return file;
  }

  /** Turns a file-system failure (ENOSPC, EACCES, EIO, ...) into a 503. */
  private fail(err: unknown): never {
    if (isAppError(err)) throw err;
    if (codeOf(err)) throw Errors.unavailable('storage', err);
    throw err;
  }

  private tempPath(kind: string): string {
    return path.join(this.tempDir, `${randomUUID()}.${kind}`);
  }

  private async removeQuietly(file: string): Promise<void> {
    await fsp.rm(file, { force: true }).catch(() => undefined);
  }

  /**
   * Renames into place, creating the parent directories (again, if a remove
   * pruned them). A key under an existing object's key ("a/b" beside "a"), or
   * an object's key that is another's directory, is a conflict (409).
   */
  private async renameInto(from: string, to: string, key: string): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await fsp.mkdir(path.dirname(to), { recursive: true });
        await fsp.rename(from, to);
        return;
      } catch (err) {
        const code = codeOf(err) ?? '';
        if (SHAPE_CODES.has(code)) {
          throw Errors.conflict(`Object key "${key}" conflicts with an existing key`);
        }
        if (code !== 'ENOENT' || attempt >= 3) throw err;
      }
    }
  }

  async init(): Promise<void> {
    try {
      await fsp.mkdir(this.tempDir, { recursive: true });
      const cutoff = Date.now() - this.staleTempMs;
      for (const name of await fsp.readdir(this.tempDir)) {
        const file = path.join(this.tempDir, name);
        const st = await fsp.stat(file).catch(() => undefined);
        if (st && st.mtimeMs < cutoff) {
          await this.removeQuietly(file);
          this.options.logger?.info({ file }, 'removed a stale temporary file');
        }
      }
    } catch (err) {
      this.fail(err);
    }
  }

  async ping(): Promise<void> {
    const probe = this.tempPath('ping');
    try {
      await fsp.writeFile(probe, 'ping', { flag: 'wx' });
    } catch (err) {
      throw Errors.unavailable('storage', err);
    } finally {
      await this.removeQuietly(probe);
    }
  }

  async put(key: string, body: Readable | Buffer, options: PutOptions): Promise<PutResult> {
    const target = this.pathOf(key);
    const tempName = `${randomUUID()}~${encodeKey(key)}`;
    const temp = path.join(
      this.tempDir,
      tempName.length <= MAX_TEMP_NAME ? tempName : randomUUID(),
    );
    const metaTemp = this.tempPath('meta');
    this.inProgress.set(temp, key);
    // The body's own failure is rethrown as it is (the client went away, a limit tripped).
    let bodyError: unknown;
    try {
      await fsp.mkdir(this.tempDir, { recursive: true });
      let bytes: number;
      if (Buffer.isBuffer(body)) {
        await fsp.writeFile(temp, body, { flag: 'wx' });
        bytes = body.length;
      } else {
        const out = createWriteStream(temp, { flags: 'wx' });
        // The file's own failure (ENOSPC, EIO) is told apart from the body's.
        let fileError: unknown;
        out.once('error', (err) => (fileError = err));
        try {
          await pipeline(body, out);
        } catch (err) {
          if (fileError === undefined || err !== fileError) bodyError = err;
          throw err;
        }
        bytes = out.bytesWritten;
      }
      await fsp.writeFile(metaTemp, JSON.stringify({ contentType: options.contentType }), {
        flag: 'wx',
      });
      // The data's rename is the commit; the sidecar goes first so it is never missing.
      await this.renameInto(metaTemp, target + META_SUFFIX, key);
      await this.renameInto(temp, target, key).catch(async (err: unknown) => {
        // No object there after all: its sidecar goes too.
        if (!(await this.stat(key).catch(() => null)))
          await this.removeQuietly(target + META_SUFFIX);
        throw err;
      });
      return { bytes };
    } catch (err) {
      if (!Buffer.isBuffer(body)) body.destroy();
      await Promise.all([this.removeQuietly(temp), this.removeQuietly(metaTemp)]);
      if (bodyError !== undefined && err === bodyError) throw err;
      return this.fail(err);
    } finally {
      this.inProgress.delete(temp);
    }
  }

  async get(key: string, range?: ByteRange): Promise<Readable> {
    const file = this.pathOf(key);
    let handle: fsp.FileHandle;
    try {
      handle = await fsp.open(file, 'r');
      const st = await handle.stat().catch(async (err: unknown) => {
        await handle.close();
        throw err;
      });
      if (!st.isFile()) {
        await handle.close();
        throw Errors.mediaNotFound(key);
      }
    } catch (err) {
      if (MISSING_CODES.has(codeOf(err) ?? '')) throw Errors.mediaNotFound(key);
      return this.fail(err);
    }
    return handle.createReadStream(range ? { start: range.start, end: range.end } : {});
  }

  async stat(key: string): Promise<ObjectInfo | null> {
    const file = this.pathOf(key);
    try {
      const st = await fsp.stat(file);
      if (!st.isFile()) return null;
      return { size: st.size, etag: etagOf(st), lastModified: new Date(st.mtimeMs) };
    } catch (err) {
      if (MISSING_CODES.has(codeOf(err) ?? '')) return null;
      return this.fail(err);
    }
  }

  /** The content type stored with `key` by `put` (undefined when the object is missing). */
  async contentType(key: string): Promise<string | undefined> {
    const file = this.pathOf(key);
    if (!(await this.stat(key))) return undefined;
    try {
      const meta = JSON.parse(await fsp.readFile(file + META_SUFFIX, 'utf8')) as {
        contentType?: unknown;
      };
      return typeof meta.contentType === 'string' ? meta.contentType : DEFAULT_CONTENT_TYPE;
    } catch {
      return DEFAULT_CONTENT_TYPE;
    }
  }

  async copy(fromKey: string, toKey: string): Promise<void> {
    const from = this.pathOf(fromKey);
    const to = this.pathOf(toKey);
    if (from === to) return;
    const dataTemp = this.tempPath('copy');
    const metaTemp = this.tempPath('meta');
    try {
      await fsp.mkdir(this.tempDir, { recursive: true });
      try {
        await fsp.copyFile(from, dataTemp, fsConstants.COPYFILE_FICLONE);
      } catch (err) {
        if (MISSING_CODES.has(codeOf(err) ?? '')) throw Errors.mediaNotFound(fromKey);
        throw err;
      }
      try {
        await fsp.copyFile(from + META_SUFFIX, metaTemp);
      } catch (err) {
        if (codeOf(err) !== 'ENOENT') throw err;
        await fsp.writeFile(metaTemp, JSON.stringify({ contentType: DEFAULT_CONTENT_TYPE }));
      }
      await this.renameInto(metaTemp, to + META_SUFFIX, toKey);
      await this.renameInto(dataTemp, to, toKey).catch(async (err: unknown) => {
        if (!(await this.stat(toKey).catch(() => null))) await this.removeQuietly(to + META_SUFFIX);
        throw err;
      });
    } catch (err) {
      await Promise.all([this.removeQuietly(dataTemp), this.removeQuietly(metaTemp)]);
      this.fail(err);
    }
  }

  async remove(key: string): Promise<void> {
    const file = this.pathOf(key);
    try {
      await fsp.rm(file, { force: true });
      await fsp.rm(file + META_SUFFIX, { force: true });
    } catch (err) {
      // A key shaped like a directory (or under a file) is not an object: nothing to remove.
      if (MISSING_CODES.has(codeOf(err) ?? '')) return;
      this.fail(err);
    }
    await this.pruneEmptyDirs(path.dirname(file));
  }

  /** Removes now-empty directories from `dir` up to (not including) the root. */
  private async pruneEmptyDirs(dir: string): Promise<void> {
    let current = dir;
    while (current.startsWith(this.root + path.sep)) {
      try {
        await fsp.rmdir(current);
      } catch {
        return; // not empty (or already gone, or a put is filling it): stop
      }
      current = path.dirname(current);
    }
  }

  async removeMany(keys: string[]): Promise<void> {
    for (const key of keys) this.pathOf(key);
    const batch = 16;
    for (let i = 0; i < keys.length; i += batch) {
      await Promise.all(keys.slice(i, i + batch).map((key) => this.remove(key)));
    }
  }

  /**
   * Every object whose key starts with `prefix`, in key order: directory
   * entries are visited sorted by name, a directory as `name/`, which is the
   * order of the keys themselves (as S3 lists them).
   */
  async *list(prefix: string): AsyncIterable<ListedObject> {
    if (prefix.includes('\0') || prefix.includes('\\')) return;
    if (prefix.startsWith(`${TEMP_DIR}/`)) return;
    const slash = prefix.lastIndexOf('/');
    const dirPrefix = slash >= 0 ? prefix.slice(0, slash + 1) : '';
    // The deepest directory every match is under; a prefix that could leave the root lists nothing.
    if (dirPrefix && dirPrefix.split('/').some((s, i, all) => i < all.length - 1 && !isName(s))) {
      return;
    }
    yield* this.walk(dirPrefix, prefix);
  }

  private async *walk(dirKey: string, prefix: string): AsyncGenerator<ListedObject> {
    const dir = path.join(this.root, ...dirKey.split('/').filter(Boolean));
    let entries: Dirent[];
    try {
      entries = await fsp.readdir(dir, { withFileTypes: true });
    } catch (err) {
      if (MISSING_CODES.has(codeOf(err) ?? '')) return;
      return this.fail(err);
    }
    const named = entries
      .filter((e) => !(dirKey === '' && e.name === TEMP_DIR))
      .filter((e) => e.isDirectory() || (e.isFile() && !e.name.endsWith(META_SUFFIX)))
      .map((e) => ({ entry: e, sortKey: e.isDirectory() ? `${e.name}/` : e.name }))
      .sort((a, b) => (a.sortKey < b.sortKey ? -1 : a.sortKey > b.sortKey ? 1 : 0));
    for (const { entry } of named) {
      const key = dirKey + entry.name;
      if (entry.isDirectory()) {
        const sub = `${key}/`;
        if (sub.startsWith(prefix) || prefix.startsWith(sub)) yield* this.walk(sub, prefix);
        continue;
      }
      if (!key.startsWith(prefix)) continue;
      const st = await fsp.stat(path.join(dir, entry.name)).catch(() => undefined);
      if (st?.isFile()) yield { key, size: st.size, lastModified: new Date(st.mtimeMs) };
    }
  }

  /**
   * Keys with a put in progress, or left unfinished by a crash, under
   * `prefix`: the temporary files in `<root>/.tmp` (whose names carry their
   * key), plus this process's own puts of keys too long for a file name.
   */
  async listIncompleteUploads(prefix: string): Promise<string[]> {
    const keys = new Set<string>();
    for await (const upload of this.incompleteUploads(prefix)) keys.add(upload.key);
    for (const key of this.inProgress.values()) if (key.startsWith(prefix)) keys.add(key);
    return [...keys].sort();
  }

  /**
   * The temporary files of puts in progress or left by a crash whose key is
   * known (their name carries it) under `prefix`; `initiated` is the file's
   * last write.
   */
  async *incompleteUploads(prefix: string): AsyncIterable<IncompleteUpload> {
    let names: string[] = [];
    try {
      names = await fsp.readdir(this.tempDir);
    } catch (err) {
      if (codeOf(err) !== 'ENOENT') this.fail(err);
    }
    for (const name of names.sort()) {
      const file = path.join(this.tempDir, name);
      const tilde = name.indexOf('~');
      const key = tilde < 0 ? this.inProgress.get(file) : decodeKey(name.slice(tilde + 1));
      if (key === undefined || !key.startsWith(prefix)) continue;
      const st = await fsp.stat(file).catch(() => undefined);
      if (st) yield { key, uploadId: name, initiated: new Date(st.mtimeMs) };
    }
  }

  /** The directory of a multipart upload's parts (its id checked: a uuid). */
  private partsDir(uploadId: string): string {
    if (!/^[0-9a-f-]{36}$/.test(uploadId)) {
      throw new Error(`Invalid upload id ${JSON.stringify(uploadId)}`);
    }
    return path.join(this.tempDir, `mpu-${uploadId}`);
  }

  /**
   * Multipart uploads on the file system: each part a file of the upload's
   * directory under `.tmp`, joined into the object by a `put` at completion
   * (the file system has no part-size rule).
   */
  readonly multipart: MultipartUploads = {
    create: async (key, contentType) => {
      this.pathOf(key);
      const uploadId = randomUUID();
      const dir = this.partsDir(uploadId);
      try {
        await fsp.mkdir(dir, { recursive: true });
        await fsp.writeFile(path.join(dir, 'content-type'), contentType);
      } catch (err) {
        this.fail(err);
      }
      return uploadId;
    },
    putPart: async (_key, uploadId, partNumber, data) => {
      const file = path.join(this.partsDir(uploadId), String(partNumber));
      try {
        await fsp.writeFile(`${file}.new`, data);
        await fsp.rename(`${file}.new`, file);
        return etagOf(await fsp.stat(file));
      } catch (err) {
        return this.fail(err);
      }
    },
    copyPart: async (_key, uploadId, partNumber, sourceKey) => {
      const file = path.join(this.partsDir(uploadId), String(partNumber));
      try {
        await fsp.copyFile(this.pathOf(sourceKey), file);
        return etagOf(await fsp.stat(file));
      } catch (err) {
        if (MISSING_CODES.has(codeOf(err) ?? '')) throw Errors.mediaNotFound(sourceKey);
        return this.fail(err);
      }
    },
    parts: async (_key, uploadId) => {
      let names: string[];
      try {
        names = await fsp.readdir(this.partsDir(uploadId));
      } catch (err) {
        if (MISSING_CODES.has(codeOf(err) ?? '')) return null;
        return this.fail(err);
      }
      const numbers = names.filter((n) => /^\d+$/.test(n)).map(Number);
      const parts = [];
      for (const part of numbers.sort((x, y) => x - y)) {
        const file = path.join(this.partsDir(uploadId), String(part));
        const st = await fsp.stat(file);
        parts.push({ part, etag: etagOf(st), size: st.size });
      }
      return parts;
    },
    complete: async (key, uploadId, parts) => {
      const dir = this.partsDir(uploadId);
      const files = parts.map((p) => path.join(dir, String(p.part)));
      async function* joined(): AsyncGenerator<Buffer> {
        for (const file of files) yield await fsp.readFile(file);
      }
      const contentType = await fsp
        .readFile(path.join(dir, 'content-type'), 'utf8')
        .catch(() => DEFAULT_CONTENT_TYPE);
      await this.put(key, Readable.from(joined()), { contentType });
      await fsp.rm(dir, { recursive: true, force: true });
      const info = await this.stat(key);
      if (!info) throw new Error(`${key} is missing right after its multipart completion`);
      return { etag: info.etag };
    },
    abort: async (_key, uploadId) => {
      await fsp.rm(this.partsDir(uploadId), { recursive: true, force: true });
    },
  };

  async abortIncompleteUpload(upload: IncompleteUpload): Promise<void> {
    if (path.basename(upload.uploadId) !== upload.uploadId || upload.uploadId.startsWith('.')) {
      throw new Error(`Invalid upload id ${JSON.stringify(upload.uploadId)}`);
    }
    await this.removeQuietly(path.join(this.tempDir, upload.uploadId));
  }
}
