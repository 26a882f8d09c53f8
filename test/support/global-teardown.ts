/** Stops every service the global setup started itself. */
import { stopAll } from './global-setup';

export default async function globalTeardown(): Promise<void> {
  await stopAll(globalThis.__MEDIA_TEST_SERVICES__ ?? []);
}
