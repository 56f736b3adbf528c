// The key and usage commands' help, apart from their code so `plinth keys --help` loads no store.
export const KEYS_USAGE = `usage:
  plinth keys create --name NAME [--models a,b] [--rpm N] [--tpm N] [--max-concurrency N]
                     [--budget-tokens N] [--expires DATE]   prints the new key once
  plinth keys list [--json]
  plinth keys revoke KEY_ID
  plinth usage [--from DATE] [--to DATE] [--group-by key|model|day] [--json]

  --data-dir <dir> (or --config / PLINTH_DATA_DIR) picks the store, as for serve.
  DATE: YYYY-MM-DD, an ISO 8601 time, or Unix seconds.
`;
