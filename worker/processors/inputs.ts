/** Lookups every processor starts with: the organization and the records a job names. */
import { Errors } from '@shared/errors';
import type { MediaRecord } from '@shared/repositories/media.repository';
import type { Organization } from '@shared/repositories/organizations.repository';
import type { JobContext } from '../context';

export async function requireOrganization(
  ctx: Pick<JobContext, 'organizations'>,
  id: number,
): Promise<Organization> {
  const org = await ctx.organizations.findById(id);
  if (!org) throw Errors.notFound(`No organization with id ${id}`);
  return org;
}

export async function requireMedia(
  ctx: Pick<JobContext, 'media'>,
  organizationId: number,
  key: string,
): Promise<MediaRecord> {
  const record = await ctx.media.findByKey(organizationId, key);
  if (!record) throw Errors.mediaNotFound(key);
  return record;
}
