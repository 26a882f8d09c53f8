/** Organizations: created by operators (CLI), each with a first API token. */
import { Errors } from '@shared/errors';
import { isDuplicateKey } from '@shared/db/errors';
import { ORG_SLUG_PATTERN } from '@shared/media/naming';
import type {
  Organization,
  OrganizationsRepository,
} from '@shared/repositories/organizations.repository';
import type { InvalidationPublisher } from '@shared/queue/invalidations';
import type { ScanPolicy } from '@shared/scan/scan';
import type { AuthCache } from '../domain/auth-cache';
import type { IssuedToken, TokensService } from './tokens.service';

export class OrganizationsService {
  constructor(
    private readonly organizations: OrganizationsRepository,
    private readonly tokens: TokensService,
    private readonly options: {
      cache?: AuthCache | undefined;
      /** Tells every API replica of a quota change (organizations are cached with their quota). */
      invalidations?: InvalidationPublisher | undefined;
    } = {},
  ) {}

  async create(
    slug: string,
    name: string,
    tokenName: string | null = 'default',
    tokenOptions: { expiresInMs?: number | null } = {},
  ): Promise<{ organization: Organization; token: IssuedToken }> {
    if (!ORG_SLUG_PATTERN.test(slug)) {
      throw Errors.validation([
        {
          field: 'slug',
          message:
            'slug must be 2-63 lower-case letters, digits or dashes, not starting or ending with a dash',
        },
      ]);
    }
    const trimmed = name.trim();
    if (!trimmed || trimmed.length > 200) {
      throw Errors.validation([{ field: 'name', message: 'name must be 1-200 characters' }]);
    }
    let organization: Organization;
    try {
      organization = await this.organizations.create(slug, trimmed);
    } catch (err) {
      if (isDuplicateKey(err)) throw Errors.conflict(`An organization with slug "${slug}" exists`);
      throw err;
    }
    const token = await this.tokens.issue(organization.id, { ...tokenOptions, name: tokenName });
    return { organization, token };
  }

  async require(slug: string): Promise<Organization> {
    const organization = await this.organizations.findBySlug(slug);
    if (!organization) throw Errors.notFound(`No organization with slug "${slug}"`);
    return organization;
  }

  /** Sets (a number of bytes) or removes (null) the organization's quota. */
  async setQuota(id: number, quotaBytes: number | null): Promise<Organization> {
    const organization = await this.organizations.setQuota(id, quotaBytes);
    if (!organization) throw Errors.notFound(`No organization with id ${id}`);
    await this.changed(id);
    return organization;
  }

  /** Sets (a policy) or removes (null: SCAN_POLICY applies) the organization's scan policy. */
  async setScanPolicy(id: number, scanPolicy: ScanPolicy | null): Promise<Organization> {
    const organization = await this.organizations.setScanPolicy(id, scanPolicy);
    if (!organization) throw Errors.notFound(`No organization with id ${id}`);
    await this.changed(id);
    return organization;
  }

  /** Sets (seconds) or removes (null: TRASH_RETENTION_S applies) how long its deleted files stay in the trash. */
  async setTrashRetention(id: number, seconds: number | null): Promise<Organization> {
    const organization = await this.organizations.setTrashRetention(id, seconds);
    if (!organization) throw Errors.notFound(`No organization with id ${id}`);
    await this.changed(id);
    return organization;
  }

  /** Drops the organization (and its tokens) from this process's cache and every replica's. */
  async changed(id: number): Promise<void> {
    this.options.cache?.invalidate({ organizationId: id });
    await this.options.invalidations?.publish({ organizationId: id });
  }

  count(): Promise<number> {
    return this.organizations.count();
  }
}
