/**
 * Starts the real API (createApiContext + createApp) on a free port against
 * the test services, with a bucket and database of its own, and gives tests
 * what they need to look behind it: the models, the object store, and a way
 * to make organizations with tokens that upload files through the API
 * (`TestOrg.upload`, the one helper for a file a test needs stored).
 */
import { once } from 'node:events';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createApp } from '../../api/app';
import { createApiContext, type ApiContext } from '../../api/context';
import { createHttpServer } from '../../api/http-server';
import { TokensService, type IssuedToken } from '../../api/services/tokens.service';
import { createLogger } from '../../shared/logger';
import type { Organization } from '../../shared/repositories/organizations.repository';
import type { ObjectStore } from '../../shared/storage/object-store';
import { S3ObjectStore } from '../../shared/storage/s3-object-store';
import { createS3Client } from '../../shared/storage/s3-client';
import {
  isolatedEnv,
  recordOrphansBeforeWipe,
  s3Endpoint,
  uniqueSuffix,
  type IsolatedEnv,
} from './context';
import { eventually } from './eventually';
import { fixture } from './files';
import { expectMatchesSpec } from './openapi';
import { hostPortOf, startTcpProxy, type TcpProxy } from './tcp-proxy';

/** A record as `POST /media/upload` answers it (`data`; without `folderId`, as the interface shows it). */
export interface UploadedMedia {
  id: number;
  organizationId: number;
  name: string;
  url: string;
  key: string;
  bucket: string;
  mimetype: string;
  size: number;
  bytes: number;
  checksum: string;
  metaData: Record<string, unknown>;
  createdAt: string;
  updatedAt: string;
}

/** What `TestOrg.upload` sends beside the file. */
export interface UploadOptions {
  /** The `folder` field (a folder name, found or created), sent before the file. */
  folder?: string;
  /** The `folderId` field, sent before the file. */
  folderId?: number | string;
  /** Headers beside the organization's Authorization (Idempotency-Key, User-Agent, …). */
  headers?: Record<string, string>;
  /**
   * The base URL of another API on the same services to send it to (an API
   * process, a second replica); default: the API that made the organization.
   */
  via?: string;
}

export interface TestOrg {
  organization: Organization;
  token: string;
  tokenId: string;
  auth: { Authorization: string };
  /**
   * Uploads `file` (bytes, or the name of a file in test/fixtures) through
   * `POST /media/upload` as `name` (default: the fixture's name, or
   * `file.bin`), expects 201 with an answer as api/openapi.yaml describes it,
   * and answers the stored file's key. For tests that need a file stored; a
   * test of the upload itself sends its own request.
   */
  upload(file: Buffer | string, name?: string, options?: UploadOptions): Promise<string>;
  /** The same, answering the whole record. */
  uploadRecord(
    file: Buffer | string,
    name?: string,
    options?: UploadOptions,
  ): Promise<UploadedMedia>;
}

/** `TestOrg.uploadRecord` for an organization's Authorization header on the API at `url`. */
export async function uploadThrough(
  url: string,
  auth: { Authorization: string },
  file: Buffer | string,
  name?: string,
  options: UploadOptions = {},
): Promise<UploadedMedia> {
  const bytes = typeof file === 'string' ? fixture(file) : file;
  const fd = new FormData();
  if (options.folder !== undefined) fd.append('folder', options.folder);
  if (options.folderId !== undefined) fd.append('folderId', String(options.folderId));
  fd.append('file', new Blob([bytes]), name ?? (typeof file === 'string' ? file : 'file.bin'));
  const res = await fetch(`${options.via ?? url}/media/upload`, {
    method: 'POST',
    headers: { ...options.headers, ...auth },
    body: fd,
  });
  const body = (await res.json()) as { data: UploadedMedia };
  // The body is in the failure message: a refused upload says why.
  expect({ status: res.status, body }).toMatchObject({ status: 201 });
  expectMatchesSpec('POST', '/media/upload', res.status, body, res.headers);
  return body.data;
}

/** A TestOrg for an organization and one of its tokens, uploading to the API at `url`. */
export function testOrg(
  url: string,
  organization: Organization,
  token: { token: string; tokenId: string },
): TestOrg {
  const auth = { Authorization: `Bearer ${token.token}` };
  return {
    organization,
    token: token.token,
    tokenId: token.tokenId,
    auth,
    uploadRecord: (file, name, options) => uploadThrough(url, auth, file, name, options),
    upload: async (file, name, options) =>
      (await uploadThrough(url, auth, file, name, options)).key,
  };
}

export interface TestApi {
  url: string;
  ctx: ApiContext;
  env: IsolatedEnv;
  server: Server;
  createOrg(slug?: string): Promise<TestOrg>;
  /**
   * A token of the organization that expired an hour ago: issued (for one
   * minute) by a TokensService on the API's repositories whose clock reads an
   * hour earlier, so no test waits for a token to expire.
   */
  issueExpiredToken(organizationId: number, name?: string): Promise<IssuedToken>;
  /** Every object key in the bucket. */
  objectKeys(prefix?: string): Promise<string[]>;
  /**
   * Waits (at most `timeoutMs`) until no object is left under `prefix`: for
   * removals the service makes off the answer's path (a merge's uploaded
   * inputs, say), which are not done yet when the answer arrives.
   */
  expectNoObjects(prefix: string, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export async function startApi(
  name: string,
  options: {
    env?: NodeJS.ProcessEnv;
    store?: ObjectStore;
    /** Where the server listens (default 127.0.0.1; `::` listens like production, dual-stack). */
    host?: string;
  } = {},
): Promise<TestApi> {
  const env = isolatedEnv(name, options.env);
  const logger = createLogger({ level: env.config.logLevel });
  const ctx = await createApiContext(
    env.config,
    logger,
    options.store ? { store: options.store } : {},
  );
  const server = createHttpServer(createApp(ctx), logger);
  server.listen(0, options.host ?? '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const url = `http://127.0.0.1:${port}`;

  return {
    url,
    ctx,
    env,
    server,
    async createOrg(slug = `org-${uniqueSuffix(3)}`) {
      const { organization, token } = await ctx.organizations.create(slug, `Org ${slug}`);
      return testOrg(url, organization, token);
    },
    issueExpiredToken(organizationId, name = 'expired') {
      const anHourAgo = () => new Date(Date.now() - 3_600_000);
      const { tokens, organizations } = ctx.repositories;
      return new TokensService(tokens, organizations, anHourAgo).issue(organizationId, {
        name,
        expiresInMs: 60_000,
      });
    },
    async objectKeys(prefix = '') {
      const keys: string[] = [];
      for await (const o of ctx.store.list(prefix)) keys.push(o.key);
      return keys.sort();
    },
    async expectNoObjects(prefix, timeoutMs = 10_000) {
      const left = async () => {
        const keys: string[] = [];
        for await (const o of ctx.store.list(prefix)) keys.push(o.key);
        return keys.sort();
      };
      await eventually(async () => expect(await left()).toEqual([]), timeoutMs);
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      if (!options.store) {
        // What the wipe below would hide fails the run (global teardown). (With
        // a store of its own, the caller records and wipes it.)
        await recordOrphansBeforeWipe(env, ctx.store, ctx.models, ctx.queue);
        const keys: string[] = [];
        for await (const o of ctx.store.list('')) keys.push(o.key);
        await ctx.store.removeMany(keys);
        const { createS3Client } = await import('../../shared/storage/s3-client');
        await createS3Client(env.config.s3!)
          .removeBucket(env.bucket)
          .catch(() => undefined);
      }
      // A database named by the caller (MONGODB_URI) is the caller's to drop.
      if (!options.env?.MONGODB_URI) await ctx.connection.dropDatabase().catch(() => undefined);
      await ctx.close();
    },
  };
}

/**
 * An API whose object storage is reached through a TCP proxy the test can cut
 * (`proxy.cut()`) and restore: storage "goes away" for the API only.
 */
export async function startApiWithProxiedStorage(
  name: string,
): Promise<{ api: TestApi; proxy: TcpProxy; close(): Promise<void> }> {
  const { host, port } = hostPortOf(s3Endpoint().endpoint);
  const proxy = await startTcpProxy(host, port);
  const env = isolatedEnv(name);
  const s3 = env.config.s3!;
  const store = new S3ObjectStore({
    client: createS3Client({ ...s3, endpoint: proxy.via(s3.endpoint) }),
    bucket: env.bucket,
    region: s3.region,
    publicEndpoint: s3.endpoint,
    logger: createLogger({ level: 'silent' }),
  });
  await store.init();
  const api = await startApi(name, { store, env: { S3_BUCKET: env.bucket } });
  return {
    api,
    proxy,
    async close() {
      await proxy.restore();
      await recordOrphansBeforeWipe(api.env, store, api.ctx.models, api.ctx.queue);
      const keys: string[] = [];
      for await (const o of store.list('')) keys.push(o.key);
      await store.removeMany(keys);
      await createS3Client(s3)
        .removeBucket(env.bucket)
        .catch(() => undefined);
      await api.close();
      await proxy.close();
    },
  };
}
