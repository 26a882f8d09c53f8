/**
 * Every listener of the service's domain events, in one place (the registry
 * checks them at boot). A new reaction to an event is one entry here: see
 * docs/architecture.md, "Three changes, walked through".
 */
import type { Listener } from './listener';
import { pdfPagesListener } from './pdf-pages.listener';
import { scanListener } from './scan.listener';
import { thumbhashListener } from './thumbhash.listener';
import { webhooksListener } from './webhooks.listener';

export const LISTENERS: readonly Listener[] = [
  scanListener,
  thumbhashListener,
  pdfPagesListener,
  webhooksListener,
];
