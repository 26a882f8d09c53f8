/**
 * Starts the real API (createApiContext + createApp) on a free port against
 * the test services, with a bucket and database of its own, and gives tests
 * what they need to look behind it: the models, the object store, and a way
 * to make organizations with tokens.
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
import { hostPortOf, startTcpProxy, type TcpProxy } from './tcp-proxy';

export interface TestOrg {
  organization: Organization;
  token: string;
  tokenId: string;
  auth: { Authorization: string };
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
      return {
        organization,
        token: token.token,
        tokenId: token.tokenId,
        auth: { Authorization: `Bearer ${token.token}` },
      };
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
