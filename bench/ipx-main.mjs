/**
 * The ipx peer of the render-peers benchmark (bench/benchmarks/render-peers.ts):
 * ipx (the image server behind Nuxt Image) serving the files of one folder
 * over HTTP, as its own `ipxFSStorage` and Node handler make it, nothing of
 * ours in between. Plain JavaScript: ipx is an ES module and the suite is
 * compiled as CommonJS. Started like a worker (same Node flags and
 * environment); tells its port over IPC and stops when the IPC channel closes.
 */
import { createServer } from 'node:http';
import { createIPX, createIPXNodeHandler, ipxFSStorage } from 'ipx';

const dir = process.argv[2];
if (!dir) throw new Error('usage: ipx-main.mjs <folder>');
const ipx = createIPX({ storage: ipxFSStorage({ dir }) });
const server = createServer(createIPXNodeHandler(ipx));
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  process.send({ port: typeof address === 'object' && address ? address.port : 0 });
});
process.on('disconnect', () => {
  server.closeAllConnections();
  server.close(() => process.exit(0));
});
