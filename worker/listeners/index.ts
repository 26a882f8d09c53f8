/**
 * Every listener of the service's domain events, in one place (the registry
 * checks them at boot). A new reaction to an event is one entry here: see
 * docs/architecture.md, "Adding a listener".
 */
import type { Listener } from './listener';
import { scanListener } from './scan.listener';

export const LISTENERS: readonly Listener[] = [scanListener];
