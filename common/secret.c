/* Memory for secrets (see secret.h). */
#include "secret.h"

#include <openssl/crypto.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t rounded(size_t n)
{
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return (n + page - 1) / page * page;
}

void *rp_secret_alloc(size_t n)
{
  size_t len = rounded(n ? n : 1);
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
  /* Both are defence in depth, so a refusal is no reason to fail: the daemons are also
   * not dumpable at all (PR_SET_DUMPABLE 0). */
  (void)madvise(p, len, MADV_DONTDUMP);
  (void)mlock(p, len);
  return p;
}

void rp_secret_free(void *p, size_t n)
{
  if (!p)
    return;
  size_t len = rounded(n ? n : 1);
  OPENSSL_cleanse(p, len);
  munlock(p, len);
  munmap(p, len);
}
