/**
 * Signed URLs: a download (or render) URL of a record, with the organization,
 * an expiry and an HMAC-SHA256 signature (api/domain/url-signature.ts), that
 * works without a bearer token until it expires, for as long as the record
 * exists. The first key of URL_SIGNING_KEYS signs, every one verifies.
 */
import type { Config } from '@shared/config';
import { Errors } from '@shared/errors';
import { RENDER_PARAM_NAMES, type RenderParamName } from '@shared/media/render-params';
import type { MediaRepository } from '@shared/repositories/media.repository';
import type {
  Organization,
  OrganizationsRepository,
} from '@shared/repositories/organizations.repository';
import type { Caller } from '../domain/caller';
import { isRenderableSource, type RenderService } from './render.service';
import { checkSignature, EXPIRES_PARAM, ORG_PARAM, signedQuery } from '../domain/url-signature';

export type Disposition = 'inline' | 'attachment';

export interface SignRequest {
  mediaKeys: string[];
  /** Seconds; default one hour (or the maximum, when that is shorter). */
  expiresIn?: number | undefined;
  disposition?: Disposition | undefined;
  /**
   * Sign `/media/render` URLs with these render parameters instead of
   * download URLs (`RenderParamsInput`, read by the render's own schema):
   * written into the URL under their names, in their order, as the render's
   * query would carry them (a number as its decimal text).
   */
  render?: Readonly<Record<string, unknown>> | undefined;
}

export interface SignedUrls {
  /** When the URLs stop working (ISO 8601), and the same instant as the URLs' `expires`. */
  expiresAt: string;
  expires: number;
  urls: { mediaKey: string; url: string }[];
}

/** What a verified signed URL grants: reading the organization's records, until `expiresAt`. */
export interface SignedAccess {
  organization: Organization;
  expiresAt: Date;
}

export const DOWNLOAD_PATH = '/media/download';
export const RENDER_PATH = '/media/render';
const DEFAULT_EXPIRES_IN = 3600;
const ORG_ID = /^[1-9]\d{0,15}$/;
const EPOCH_SECONDS = /^\d{1,12}$/;

export class SignedUrlService {
  constructor(
    private readonly deps: {
      signing: Config['urlSigning'];
      publicBaseUrl: string;
      media: MediaRepository;
      organizations: Pick<OrganizationsRepository, 'findById'>;
      /** The render operation's own reading of its options: a render URL is signed only if it would be accepted. */
      renders: Pick<RenderService, 'check'>;
      now?: () => Date;
    },
  ) {}

  get enabled(): boolean {
    return this.deps.signing !== undefined;
  }

  private now(): Date {
    return this.deps.now?.() ?? new Date();
  }

  /** Signs a URL for each key; every key must name a record of the caller's organization (else 404). */
  async sign(caller: Pick<Caller, 'organization'>, request: SignRequest): Promise<SignedUrls> {
    const org = caller.organization;
    const signing = this.deps.signing;
    if (!signing) throw Errors.signedUrlsDisabled();
    const expiresIn = this.expiresIn(request.expiresIn);
    // 400 VALIDATION_FAILED (each field named `render.<option>`) for options the
    // render would refuse in a signed request, so a signed URL never answers
    // only a 400. The source's other checks (an image, the variants' maximum)
    // are the render's, when the URL is used.
    if (request.render) this.deps.renders.check(request.render, 'render');
    const render = request.render && renderParams(request.render);
    const records = await this.deps.media.findByKeys(org.id, request.mediaKeys);
    for (const key of request.mediaKeys) {
      const record = records.get(key);
      if (!record) throw Errors.mediaNotFound(key);
      // Quarantined files are never signed; the scan policy is applied when the URL is used.
      if (record.scanStatus === 'infected') throw Errors.fileInfected(key);
      if (request.render && !isRenderableSource(record.mimetype)) {
        throw Errors.unsupportedType(
          `"${key}" is ${record.mimetype}, not an image or a PDF: it has no renders`,
        );
      }
    }
    const expires = Math.floor(this.now().getTime() / 1000) + expiresIn;
    const path = request.render ? RENDER_PATH : DOWNLOAD_PATH;
    const [key] = signing.keys;
    const urls = request.mediaKeys.map((mediaKey) => {
      const params: [string, string][] = [['media', mediaKey], ...(render ?? [])];
      if (request.disposition) params.push(['disposition', request.disposition]);
      params.push([ORG_PARAM, String(org.id)], [EXPIRES_PARAM, String(expires)]);
      return {
        mediaKey,
        url: `${this.deps.publicBaseUrl}${path}?${signedQuery(key!, path, params)}`,
      };
    });
    return { expiresAt: new Date(expires * 1000).toISOString(), expires, urls };
  }

  /**
   * A signed GET URL of `path` with `params` (after the caller's checks of
   * them), for the caller's organization, valid `expiresIn` seconds (the
   * default and maximum as for `sign`): an archive's URL.
   */
  signPath(
    caller: Pick<Caller, 'organization'>,
    path: string,
    params: [string, string][],
    expiresInAsked?: number,
  ): { url: string; expiresAt: string; expires: number } {
    const signing = this.deps.signing;
    if (!signing) throw Errors.signedUrlsDisabled();
    const expires = Math.floor(this.now().getTime() / 1000) + this.expiresIn(expiresInAsked);
    const all: [string, string][] = [
      ...params,
      [ORG_PARAM, String(caller.organization.id)],
      [EXPIRES_PARAM, String(expires)],
    ];
    return {
      url: `${this.deps.publicBaseUrl}${path}?${signedQuery(signing.keys[0]!, path, all)}`,
      expiresAt: new Date(expires * 1000).toISOString(),
      expires,
    };
  }

  /** The seconds a URL is valid: asked (at most URL_SIGNING_MAX_EXPIRES_IN, else 400) or the default. */
  private expiresIn(asked: number | undefined): number {
    const signing = this.deps.signing;
    if (!signing) throw Errors.signedUrlsDisabled();
    const expiresIn = asked ?? Math.min(DEFAULT_EXPIRES_IN, signing.maxExpiresIn);
    if (expiresIn > signing.maxExpiresIn) {
      throw Errors.validation([
        {
          field: 'expiresIn',
          message: `expiresIn must be at most ${signing.maxExpiresIn} seconds (URL_SIGNING_MAX_EXPIRES_IN)`,
        },
      ]);
    }
    return expiresIn;
  }

  /**
   * What the signed request `path?query` (the raw query string) may read: 403
   * SIGNED_URL_INVALID unless one of the keys signed exactly this path and
   * these parameters, then 403 SIGNED_URL_EXPIRED once `expires` has passed.
   * (Whether the record still exists is the route's question: a 404.)
   */
  async verify(path: string, query: string): Promise<SignedAccess> {
    const signing = this.deps.signing;
    if (!signing) throw Errors.signedUrlsDisabled();
    const check = checkSignature(signing.keys, path, query);
    if (!check.ok) {
      throw Errors.signedUrlInvalid(
        check.reason === 'repeated'
          ? 'A signed URL may not repeat a parameter'
          : check.reason === 'malformed'
            ? 'The signature of this URL is malformed'
            : 'The signature of this URL is not valid (changed, for other parameters, or made with a retired key)',
      );
    }
    const orgId = check.params.get(ORG_PARAM) ?? '';
    const expires = check.params.get(EXPIRES_PARAM) ?? '';
    if (!ORG_ID.test(orgId) || !EPOCH_SECONDS.test(expires)) {
      throw Errors.signedUrlInvalid(`A signed URL carries ${ORG_PARAM} and ${EXPIRES_PARAM}`);
    }
    const expiresAt = new Date(Number(expires) * 1000);
    if (expiresAt.getTime() <= this.now().getTime()) throw Errors.signedUrlExpired(expiresAt);
    const organization = await this.deps.organizations.findById(Number(orgId));
    // The organization is gone, and every record with it.
    if (!organization) throw Errors.mediaNotFound(check.params.get('media') ?? '');
    return { organization, expiresAt };
  }
}

/** Seconds from `now` until `expiresAt` (never negative): the max-age of a signed answer. */
export function secondsUntil(expiresAt: Date, now = new Date()): number {
  return Math.max(0, Math.floor((expiresAt.getTime() - now.getTime()) / 1000));
}

/** The render parameters as the URL writes them: their names in order, empty ones left out. */
function renderParams(options: Readonly<Record<string, unknown>>): [RenderParamName, string][] {
  const params: [RenderParamName, string][] = [];
  for (const name of RENDER_PARAM_NAMES) {
    const value = options[name];
    // (checked by the render's schema first: a string or a number)
    if (typeof value === 'number') params.push([name, String(value)]);
    else if (typeof value === 'string' && value !== '') params.push([name, value]);
  }
  return params;
}
