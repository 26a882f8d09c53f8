/**
 * The API's HTTP server around the Express app, built the same way by main.ts
 * and the tests: timeouts suited to long uploads, and parser-level errors
 * (headers over the limit, a malformed request) in the documented envelope.
 */
import { createServer, type Server } from 'node:http';
import type { Express } from 'express';
import type { Logger } from '@shared/logger';
import { clientErrorHandler } from './middleware/error-handler';

export function createHttpServer(app: Express, logger: Logger): Server {
  const server = createServer(app);
  // Uploads may be slow; a stalled client is cut after 5 minutes without data.
  server.requestTimeout = 0;
  server.timeout = 5 * 60_000;
  // Idle keep-alive connections outlive a load balancer's (60 s is common: AWS ALB, nginx
  // upstreams), so the balancer never sends on a connection the API is closing (a 502);
  // clients read `Keep-Alive: timeout=65` and let go first. server.close() ends idle ones.
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  server.on('clientError', clientErrorHandler(logger));
  return server;
}
