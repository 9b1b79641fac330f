/* workload_error_note: a NaN anywhere in a check's errors must fail the check and name
 * where it was, whatever numbers come after it. */
#include <math.h>
#include <stdio.h>

#include "workload.h"

static int failures;

static void expect(int ok, const char *what)
{
  if (!ok) {
    fprintf(stderr, "FAIL: %s\n", what);
    failures++;
  }
}

int main(void)
{
  const double middle_nan[] = { 1e-15, 2e-15, NAN, 1e-16, 3e-15 };
  struct workload_error err = { 0.0, 0 };
  for (size_t i = 0; i < sizeof middle_nan / sizeof middle_nan[0]; i++)
    workload_error_note(&err, middle_nan[i], i);
  expect(isnan(err.worst), "a NaN in the middle of the errors leaves worst NaN");
  expect(err.at == 2, "worst points at the NaN's index");
  expect(!(err.worst < 1e-12), "a check 'worst < 1e-12' fails on the NaN");

  const double numbers[] = { 1e-15, 5e-13, 2e-14 };
  struct workload_error plain = { 0.0, 0 };
  for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++)
    workload_error_note(&plain, numbers[i], i);
  expect(plain.worst == 5e-13 && plain.at == 1, "without NaN, worst is the largest error");

  if (failures)
    return 1;
  printf("workload_error_note: ok\n");
  return 0;
}
