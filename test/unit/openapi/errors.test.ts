/**
 * Error answers against api/openapi.yaml: the Error schema matches what the
 * error handler sends for every error factory of shared/errors.ts, and each
 * operation describes the errors the code raises for it (with the headers the
 * routes send along).
 */
import { Errors, type AppError } from '../../../shared/errors';
import { describeAjvErrors, expectMatchesSpec, validatorAt } from '../../support/openapi';
import {
  errorResponse,
  fromJob,
  IMAGE_JOB,
  IMPORT_JOB,
  jsonHeaders,
  PDF_JOB,
  statusUrl,
} from './samples';

const MiB = 1024 * 1024;

/** One sample of every error factory (typed: a new factory must be added here). */
const sampleErrors: Record<keyof typeof Errors, () => AppError> = {
  badRequest: () => Errors.badRequest('The request must be multipart/form-data'),
  validation: () => Errors.validation([{ field: 'folderId', message: 'must be an integer' }]),
  tooManyVariants: () => Errors.tooManyVariants('acme/photo-ILm6DTZ4Wc-R.jpg', 100, 100),
  invalidDataUrl: () => Errors.invalidDataUrl('the data URL is not valid base64'),
  folderMismatch: () => Errors.folderMismatch('Photos', 8),
  unauthorized: () => Errors.unauthorized(),
  notFound: () => Errors.notFound(),
  insufficientScope: () => Errors.insufficientScope('write'),
  signedUrlInvalid: () => Errors.signedUrlInvalid(),
  signedUrlExpired: () => Errors.signedUrlExpired(new Date('2026-01-01T00:00:00Z')),
  signedUrlsDisabled: () => Errors.signedUrlsDisabled(),
  mediaIdNotFound: () => Errors.mediaIdNotFound(42),
  folderNameNotFound: () => Errors.folderNameNotFound('Photos'),
  folderNotEmpty: () => Errors.folderNotEmpty(7, 3),
  rootFolder: () => Errors.rootFolder(2, 'deleted'),
  idempotencyKeyInUse: () => Errors.idempotencyKeyInUse(),
  idempotencyKeyReused: () => Errors.idempotencyKeyReused(),
  quotaExceeded: () => Errors.quotaExceeded(10 * 1024 * 1024 * 1024),
  methodNotAllowed: () => Errors.methodNotAllowed('GET'),
  mediaNotFound: () => Errors.mediaNotFound('acme/photos/holiday-ILm6DTZ4Wc-R.jpg'),
  folderNotFound: () => Errors.folderNotFound(99),
  jobNotFound: () => Errors.jobNotFound('17'),
  conflict: () => Errors.conflict('already exists'),
  urlNotAllowed: () => Errors.urlNotAllowed('"localhost" is a loopback name'),
  urlFetchFailed: () => Errors.urlFetchFailed('the server answered 404', { status: 404 }),
  duplicate: () => Errors.duplicate('holiday.jpg', 'acme/holiday-ILm6DTZ4Wc-R.jpg'),
  rangeNotSatisfiable: () => Errors.rangeNotSatisfiable(251505),
  tusVersion: () => Errors.tusVersion(),
  offsetMismatch: () => Errors.offsetMismatch(5242880),
  checksumMismatch: () => Errors.checksumMismatch(5242880),
  uploadExpired: () => Errors.uploadExpired(),
  uploadLocked: () => Errors.uploadLocked(),
  uploadFinal: () => Errors.uploadFinal(),
  tooManyIncompleteUploads: () => Errors.tooManyIncompleteUploads(100),
  directUploadsUnsupported: () => Errors.directUploadsUnsupported(),
  uploadIncomplete: () => Errors.uploadIncomplete('The file is not in the store yet'),
  uploadNotFound: () => Errors.uploadNotFound(),
  sizeMismatch: () => Errors.sizeMismatch(1024, 1000),
  directChecksumMismatch: () => Errors.directChecksumMismatch(),
  directUploadExpired: () => Errors.directUploadExpired(),
  tooManyIncompleteDirectUploads: () => Errors.tooManyIncompleteDirectUploads(100),
  fileTooLarge: () => Errors.fileTooLarge(104857600, 'holiday.jpg'),
  tooManyFiles: () => Errors.tooManyFiles(20),
  tooManyParts: () => Errors.tooManyParts('The form has too many parts'),
  payloadTooLarge: () => Errors.payloadTooLarge('The request body is too large'),
  headersTooLarge: () => Errors.headersTooLarge(16384),
  unsupportedType: () =>
    Errors.unsupportedType('not accepted', [{ name: 'logo.svg', message: 'unknown type' }]),
  unreadable: () => Errors.unreadable('corrupt image', [{ index: 0, message: 'truncated' }]),
  encryptedPdf: () => Errors.encryptedPdf('encrypted', [{ index: 1, message: 'encrypted' }]),
  rateLimited: () => Errors.rateLimited(3),
  tooManyJobs: () => Errors.tooManyJobs(200),
  uploadIdle: () => Errors.uploadIdle(30000),
  tooManyUploads: () => Errors.tooManyUploads(8),
  resultTooLarge: () => Errors.resultTooLarge(40 * 1024 * 1024, 32 * 1024 * 1024),
  tooManyResults: () => Errors.tooManyResults(256 * 1024 * 1024, 1800),
  unavailable: () => Errors.unavailable('storage'),
  jobTimeout: () => Errors.jobTimeout('17', 'http://localhost:3000/jobs/17'),
  directUploadStillChecking: () =>
    Errors.directUploadStillChecking('import-6f0e3c2a-9b1d-5e47-8c3f-2a9d7b4e1c60'),
  processingTimeout: () => Errors.processingTimeout(120_000),
  outputTooLarge: () =>
    Errors.outputTooLarge('GIF', 4032, 3024, 4_194_304, 'MAX_GIF_OUTPUT_PIXELS'),
  scanPending: () => Errors.scanPending('acme/photo-ILm6DTZ4Wc-R.jpg'),
  fileNotScanned: () => Errors.fileNotScanned('acme/photo-ILm6DTZ4Wc-R.jpg'),
  fileInfected: () => Errors.fileInfected('acme/photo-ILm6DTZ4Wc-R.jpg'),
  internal: () => Errors.internal(new Error('boom')),
};

describe('error answers and api/openapi.yaml', () => {
  it('the Error schema matches what the error handler sends for every error factory', () => {
    const failures: string[] = [];
    const validate = validatorAt('/components/schemas/Error');
    for (const [name, make] of Object.entries(sampleErrors)) {
      const { status, body } = errorResponse(make());
      if (!validate(body))
        failures.push(`${name} (${status}):\n${describeAjvErrors(validate.errors)}`);
    }
    expect(failures).toEqual([]);
  });

  it('each operation describes the errors the code raises for it', () => {
    const downloadHeaders = {
      etag: '"03d87850d2dd2c31b14aeb15125caefe33ce700feabd79c5c5c0b33ecf075e8f"',
      'last-modified': 'Sat, 22 Nov 2025 06:52:11 GMT',
      'accept-ranges': 'bytes',
    };
    // TOO_MANY_JOBS comes after the token's cost was counted: its answer carries the counters.
    const rateLimitHeaders = {
      'ratelimit-policy': '600;w=60',
      'ratelimit-limit': '600',
      'ratelimit-remaining': '580',
      'ratelimit-reset': '42',
    };
    const raised: [string, string, AppError, Record<string, string>?][] = [
      ['POST', '/media/upload', Errors.fileTooLarge(104857600, 'holiday.jpg')],
      ['POST', '/media/upload', Errors.tooManyFiles(1)],
      ['POST', '/media/upload', Errors.folderNotFound(99)],
      ['POST', '/media/upload', Errors.folderMismatch('Photos', 8)],
      ['POST', '/media/upload', Errors.duplicate('holiday.jpg', 'acme/holiday-ILm6DTZ4Wc-R.jpg')],
      ['POST', '/media/upload/multiple', Errors.duplicate('a.jpg', 'acme/a-ILm6DTZ4Wc-R.jpg')],
      ['POST', '/media/upload/base64', Errors.duplicate('file', 'acme/file-ILm6DTZ4Wc-R.png')],
      ['POST', '/media/upload/multiple', Errors.tooManyParts('The form has too many parts')],
      ['POST', '/media/upload/multiple', Errors.unsupportedType('not accepted')],
      ['POST', '/media/upload/base64', Errors.invalidDataUrl('the data URL is not valid base64')],
      ['POST', '/media/upload/base64', Errors.payloadTooLarge('The request body is too large')],
      ['POST', '/media/upload/base64', Errors.unavailable('MongoDB')],
      ['GET', '/media/download', Errors.rangeNotSatisfiable(251505), downloadHeaders],
      ['GET', '/media/download', Errors.mediaNotFound('acme/x-ILm6DTZ4Wc-R.jpg')],
      ['GET', '/media/download', Errors.unauthorized()],
      ['GET', '/media/download', Errors.internal(new Error('boom'))],
      ['GET', '/media/metadata', Errors.validation([{ field: 'mediaKey', message: 'required' }])],
      ['GET', '/media/metadata', Errors.mediaNotFound('acme/x-ILm6DTZ4Wc-R.jpg')],
      ['GET', '/media/metadata', Errors.unsupportedType('"k" is application/pdf, not an image')],
      ['GET', '/media/metadata', Errors.payloadTooLarge('The request body is too large')],
      ['GET', '/media/metadata', Errors.unavailable('Redis')],
      ['GET', '/media/metadata', fromJob(Errors.unreadable('damaged header'))],
      ['GET', '/media/metadata', Errors.jobTimeout(IMAGE_JOB, statusUrl(IMAGE_JOB))],
      ['GET', '/media/metadata', fromJob(Errors.processingTimeout(120_000))],
      ['POST', '/media/convert', fromJob(Errors.processingTimeout(120_000))],
      [
        'POST',
        '/media/convert',
        fromJob(Errors.outputTooLarge('GIF', 4032, 3024, 4_194_304, 'MAX_GIF_OUTPUT_PIXELS')),
      ],
      ['GET', '/media/render', fromJob(Errors.processingTimeout(120_000))],
      [
        'GET',
        '/media/render',
        fromJob(Errors.outputTooLarge('AVIF', 8000, 6000, 16_777_216, 'MAX_AVIF_OUTPUT_PIXELS')),
      ],
      [
        'GET',
        '/media/jobs/{id}',
        fromJob(Errors.outputTooLarge('GIF', 4032, 3024, 4_194_304, 'MAX_GIF_OUTPUT_PIXELS')),
      ],
      ['POST', '/media/merge-pdfs', fromJob(Errors.processingTimeout(120_000))],
      ['GET', '/media/jobs/{id}', fromJob(Errors.processingTimeout(120_000))],
      ['POST', '/media/convert', Errors.tooManyParts('At most 20 fields are accepted per request')],
      ['POST', '/media/convert', fromJob(Errors.folderNotFound(7))],
      ['POST', '/media/convert', fromJob(Errors.notFound('No organization with id 3'))],
      [
        'POST',
        '/media/convert',
        fromJob(
          Errors.unreadable('too many pixels', [
            { message: 'too many pixels', width: 20000, height: 20000, limit: 100000000 },
          ]),
        ),
      ],
      ['POST', '/media/convert', fromJob(Errors.unavailable('storage'))],
      ['POST', '/media/convert', fromJob(Errors.internal(new Error('boom')))],
      ['POST', '/media/convert', Errors.jobTimeout(IMAGE_JOB, statusUrl(IMAGE_JOB))],
      ['POST', '/media/convert', Errors.tooManyJobs(200), rateLimitHeaders],
      ['GET', '/media/metadata', Errors.tooManyJobs(200), rateLimitHeaders],
      ['POST', '/media/merge-pdfs', Errors.tooManyJobs(200), rateLimitHeaders],
      ['POST', '/media/merge-pdfs', Errors.tooManyUploads(8), rateLimitHeaders],
      ['POST', '/media/merge-pdfs', Errors.uploadIdle(30000)],
      ['POST', '/media/upload', Errors.tooManyUploads(8), rateLimitHeaders],
      ['POST', '/media/upload', Errors.uploadIdle(30000)],
      ['POST', '/media/upload/multiple', Errors.tooManyUploads(8), rateLimitHeaders],
      ['POST', '/media/upload/multiple', Errors.uploadIdle(30000)],
      ['POST', '/media/merge-pdfs', Errors.badRequest('The request must be multipart/form-data')],
      ['POST', '/media/merge-pdfs', Errors.tooManyFiles(50, 'merge inputs')],
      ['POST', '/media/merge-pdfs', Errors.fileTooLarge(104857600, 'a.pdf').forInput(0, 'a.pdf')],
      ['POST', '/media/merge-pdfs', Errors.mediaNotFound('acme/k.pdf').forInput(1, 'acme/k.pdf')],
      ['POST', '/media/merge-pdfs', Errors.unsupportedType('not a PDF').forInput(0, 'a.jpg')],
      ['POST', '/media/merge-pdfs', Errors.folderMismatch('Contracts', 8)],
      ['POST', '/media/merge-pdfs', fromJob(Errors.payloadTooLarge('over 10,000 pages'))],
      [
        'POST',
        '/media/merge-pdfs',
        fromJob(Errors.encryptedPdf('encrypted', [{ index: 1, name: 's.pdf', message: 'x' }])),
      ],
      ['POST', '/media/merge-pdfs', Errors.jobTimeout(PDF_JOB, statusUrl(PDF_JOB))],
      ['GET', '/media/metadata', fromJob(Errors.resultTooLarge(40 * MiB, 32 * MiB))],
      ['GET', '/media/metadata', fromJob(Errors.tooManyResults(256 * MiB, 1800))],
      ['GET', '/media/jobs/{id}', fromJob(Errors.tooManyResults(256 * MiB, 1800))],
      ['GET', '/media/jobs/{id}', fromJob(Errors.resultTooLarge(40 * MiB, 32 * MiB))],
      ['GET', '/media/render', Errors.quotaExceeded(10 * 1024 * MiB)],
      ['GET', '/media/render', fromJob(Errors.quotaExceeded(10 * 1024 * MiB))],
      ['GET', '/media/render', fromJob(Errors.tooManyVariants('acme/k.jpg', 100, 100))],
      ['DELETE', '/media/variants', Errors.mediaNotFound('acme/k.jpg')],
      ['GET', '/media/jobs/{id}', Errors.jobNotFound('nonsense')],
      ['GET', '/media/jobs/{id}', Errors.unavailable('Redis')],
      ['GET', '/media/jobs/{id}', Errors.internal(new Error('record gone'))],
      ['GET', '/media/jobs/{id}', fromJob(Errors.badRequest('unknown job "image.x"'))],
      ['GET', '/media/jobs/{id}', fromJob(Errors.mediaNotFound('acme/k.jpg'))],
      ['GET', '/media/jobs/{id}', fromJob(Errors.fileTooLarge(104857600, 'acme/k.jpg'))],
      ['GET', '/media/jobs/{id}', fromJob(Errors.unsupportedType('not a PDF'))],
      ['GET', '/media/jobs/{id}', fromJob(Errors.unreadable('damaged', [{ message: 'x' }]))],
      ['GET', '/media/jobs/{id}', fromJob(Errors.unavailable('MongoDB'))],
      ['GET', '/media/jobs/{id}', fromJob(Errors.internal(new Error('boom')))],
      // Malware scanning: what the organization's policy does not serve.
      ['GET', '/media/download', Errors.scanPending('acme/k.jpg')],
      ['GET', '/media/download', Errors.fileNotScanned('acme/k.jpg')],
      ['GET', '/media/download', Errors.fileInfected('acme/k.jpg')],
      ['GET', '/media/render', Errors.scanPending('acme/k.jpg')],
      ['GET', '/media/render', Errors.fileInfected('acme/k.jpg')],
      ['GET', '/media/metadata', Errors.scanPending('acme/k.jpg')],
      ['GET', '/media/metadata', Errors.fileInfected('acme/k.jpg')],
      ['POST', '/media/convert', Errors.fileNotScanned('acme/k.jpg')],
      ['POST', '/media/upload/url', Errors.urlNotAllowed('"localhost" is a loopback name')],
      [
        'POST',
        '/media/upload/url',
        fromJob(Errors.urlFetchFailed('answered 404', { status: 404 })),
      ],
      [
        'POST',
        '/media/upload/url',
        fromJob(Errors.urlFetchFailed('too slow', { reason: 'timeout' })),
      ],
      ['POST', '/media/upload/url', fromJob(Errors.fileTooLarge(104857600, 'big.jpg'))],
      ['POST', '/media/upload/url', fromJob(Errors.quotaExceeded(10 * 1024 * MiB))],
      ['POST', '/media/upload/url', fromJob(Errors.unsupportedType('not accepted'))],
      ['POST', '/media/upload/url', fromJob(Errors.duplicate('a.jpg', 'acme/a-ILm6DTZ4Wc-R.jpg'))],
      ['POST', '/media/upload/url', Errors.jobTimeout(IMPORT_JOB, statusUrl(IMPORT_JOB))],
      ['POST', '/media/upload/url', Errors.folderNotFound(99)],
      ['POST', '/media/convert', Errors.fileInfected('acme/k.jpg')],
      ['POST', '/media/merge-pdfs', Errors.scanPending('acme/k.pdf').forInput(0, 'acme/k.pdf')],
      ['POST', '/media/merge-pdfs', Errors.fileInfected('acme/k.pdf').forInput(0, 'acme/k.pdf')],
      ['POST', '/media/sign', Errors.fileInfected('acme/k.jpg')],
    ];
    for (const [method, path, error, routeHeaders] of raised) {
      const { status, headers, body } = errorResponse(error);
      expect(() =>
        expectMatchesSpec(method, path, status, body, {
          ...jsonHeaders,
          ...routeHeaders,
          ...headers,
        }),
      ).not.toThrow();
    }
  });
});
