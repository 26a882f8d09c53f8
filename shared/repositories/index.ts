/** Every repository over one set of models: the one wiring both composition roots (API, worker) use. */
import type { Models } from '../db/models';
import { EventOutbox } from '../events/outbox';
import { CountersRepository } from './counters.repository';
import { FoldersRepository } from './folders.repository';
import { JobResultsRepository } from './job-results.repository';
import { MediaRepository } from './media.repository';
import { OrganizationsRepository } from './organizations.repository';
import { TokensRepository } from './tokens.repository';
import { UsageRepository } from './usage.repository';
import { VariantsRepository } from './variants.repository';
import { WebhooksRepository } from './webhooks.repository';

export interface Repositories {
  counters: CountersRepository;
  organizations: OrganizationsRepository;
  tokens: TokensRepository;
  folders: FoldersRepository;
  media: MediaRepository;
  usage: UsageRepository;
  variants: VariantsRepository;
  jobResults: JobResultsRepository;
  /** Domain events: recorded with their changes, taken by the dispatcher (shared/events/outbox.ts). */
  events: EventOutbox;
  /** Webhook endpoints and their delivery log. */
  webhooks: WebhooksRepository;
}

export function createRepositories(
  models: Models,
  settings: { usageBookingTtlMs?: number } = {},
): Repositories {
  const counters = new CountersRepository(models);
  return {
    counters,
    organizations: new OrganizationsRepository(models, counters),
    tokens: new TokensRepository(models),
    folders: new FoldersRepository(models, counters),
    media: new MediaRepository(models, counters),
    usage: new UsageRepository(models, { bookingTtlMs: settings.usageBookingTtlMs }),
    variants: new VariantsRepository(models),
    jobResults: new JobResultsRepository(models),
    events: new EventOutbox(models),
    webhooks: new WebhooksRepository(models, counters),
  };
}
