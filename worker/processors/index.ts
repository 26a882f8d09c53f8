/** Every processor of the worker; the registry checks this list at boot. */
import type { AnyProcessor } from '../registry';
import { convertProcessor } from './convert.processor';
import { deleteFolderProcessor } from './delete-folder.processor';
import { eventDeliverProcessor } from './event-deliver.processor';
import { importProcessor } from './import.processor';
import { mergePdfsProcessor } from './merge-pdfs.processor';
import { metadataProcessor } from './metadata.processor';
import { renderProcessor } from './render.processor';
import { webhookDeliverProcessor } from './webhook-deliver.processor';
import { scanProcessor } from './scan.processor';
import { purgeTrashProcessor } from './purge-trash.processor';
import { expireDirectUploadsProcessor } from './expire-direct-uploads.processor';
import { expireResumableProcessor } from './expire-resumable.processor';
import { verifyDirectUploadProcessor } from './verify-direct-upload.processor';
import { completeDirectUploadProcessor } from './complete-direct-upload.processor';

export const PROCESSORS: readonly AnyProcessor[] = [
  metadataProcessor,
  convertProcessor,
  renderProcessor,
  mergePdfsProcessor,
  deleteFolderProcessor,
  eventDeliverProcessor,
  webhookDeliverProcessor,
  scanProcessor,
  importProcessor,
  purgeTrashProcessor,
  expireDirectUploadsProcessor,
  expireResumableProcessor,
  verifyDirectUploadProcessor,
  completeDirectUploadProcessor,
];
