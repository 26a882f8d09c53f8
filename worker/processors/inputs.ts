/**
 * Lookups every processor starts with: the organization and the records a job
 * names. A job's payload is not trusted to name only its organization's
 * objects (a job can be written into Redis by hand): every key a job reads or
 * deletes is checked against the organization first.
 */
import { Errors } from '@shared/errors';
import { isTemporaryKeyOf } from '@shared/media/naming';
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

/**
 * Refuses (404 MEDIA_NOT_FOUND, as the API would) unless every temporary key
 * is under the organization's `.tmp/` prefix and every input key is either
 * one of those temporary keys or the key of one of the organization's records.
 * Answers those records, by key.
 */
export async function requireOwnInputs(
  ctx: Pick<JobContext, 'media'>,
  organization: Organization,
  inputKeys: readonly string[],
  temporaryKeys: readonly string[],
): Promise<Map<string, MediaRecord>> {
  const foreignTemporary = temporaryKeys.find((k) => !isTemporaryKeyOf(organization.slug, k));
  if (foreignTemporary !== undefined) throw Errors.mediaNotFound(foreignTemporary);
  const temporary = new Set(temporaryKeys);
  const stored = inputKeys.filter((k) => !temporary.has(k));
  const records = await ctx.media.findByKeys(organization.id, stored);
  const index = inputKeys.findIndex((k) => !temporary.has(k) && !records.has(k));
  if (index >= 0) {
    const key = inputKeys[index]!;
    throw Errors.mediaNotFound(key).forInput(index, key);
  }
  return records;
}

/**
 * The temporary keys of a job that are its organization's (for the clean-up
 * after a failure): none when the organization is unknown.
 */
export async function ownTemporaryKeys(
  ctx: Pick<JobContext, 'organizations'>,
  organizationId: number | undefined,
  temporaryKeys: readonly string[],
): Promise<{ own: string[]; foreign: string[] }> {
  const org =
    organizationId === undefined ? null : await ctx.organizations.findById(organizationId);
  const own = org ? temporaryKeys.filter((k) => isTemporaryKeyOf(org.slug, k)) : [];
  return { own, foreign: temporaryKeys.filter((k) => !own.includes(k)) };
}
