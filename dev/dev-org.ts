/**
 * The development organization `npm start` makes on first start, so a
 * newcomer has a token to try the API with: only on a MongoDB the launcher
 * started itself, never on a database given by MONGODB_URI nor under
 * NODE_ENV=production, and its token expires in 30 days.
 */
import { createDataContext } from '@api/context';
import type { Config } from '@shared/config';
import type { Logger } from '@shared/logger';

const DEV_ORG = { slug: 'dev', name: 'Development' };
/** How long the development organization's token lasts. */
export const DEV_TOKEN_DAYS = 30;

/**
 * Whether to make the development organization: only on a MongoDB this
 * launcher started itself (embedded mongod or the stand-in), never on a
 * database given by MONGODB_URI (it may be shared, or production's), and never
 * under NODE_ENV=production.
 */
export function mayBootstrap(nodeEnv: string | undefined, embeddedMongo: boolean): boolean {
  return embeddedMongo && nodeEnv !== 'production';
}

/** The development organization and a token expiring in 30 days, when the database has no organization at all. */
export async function bootstrapOrganization(
  config: Config,
  logger: Logger,
): Promise<{ slug: string; token: string; expiresAt: string } | undefined> {
  const data = await createDataContext(config, logger);
  try {
    if ((await data.organizations.count()) > 0) return undefined;
    const { organization, token } = await data.organizations.create(
      DEV_ORG.slug,
      DEV_ORG.name,
      'npm start',
      { expiresInMs: DEV_TOKEN_DAYS * 24 * 60 * 60_000 },
    );
    logger.info(
      { organization: organization.slug, tokenId: token.tokenId, expiresAt: token.expiresAt },
      'created a development organization',
    );
    return { slug: organization.slug, token: token.token, expiresAt: token.expiresAt! };
  } finally {
    await data.close();
  }
}
