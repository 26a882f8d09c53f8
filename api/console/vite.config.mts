/**
 * Builds the web console (api/console) into dist/console, served by the API at
 * /console (api/routes/console.routes.ts). No inline script or style comes out
 * (the CSP allows neither): Vite's module preload polyfill, which would be
 * inlined, is off; assets are never inlined as data: URLs into scripts.
 * The upload code (Uppy) is a separate chunk, loaded when a person uploads.
 */
import { fileURLToPath } from 'node:url';
import preact from '@preact/preset-vite';
import { defineConfig } from 'vite';

export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/console/',
  plugins: [preact({ prefreshEnabled: false, devToolsEnabled: false })],
  build: {
    outDir: fileURLToPath(new URL('../../dist/console', import.meta.url)),
    emptyOutDir: true,
    sourcemap: false,
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    reportCompressedSize: true,
    target: 'es2022',
  },
});
