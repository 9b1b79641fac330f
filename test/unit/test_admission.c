/* The per-address count of connections in their handshake (server/admission.c): one
 * host counts once however it reached the socket, and entries go when they reach zero
 * so a flood from many addresses leaves nothing behind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "admission.h"

static struct rps_addr_key v4(const char *text)
{
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  struct sockaddr_in *in = (struct sockaddr_in *)&ss;
  in->sin_family = AF_INET;
  in->sin_port = htons(1234);
  inet_pton(AF_INET, text, &in->sin_addr);
  return rps_addr_key_of(&ss);
}

static struct rps_addr_key v6(const char *text, uint16_t port)
{
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons(port);
  inet_pton(AF_INET6, text, &in6->sin6_addr);
  return rps_addr_key_of(&ss);
}

static void test_counts_per_address(void **state)
{
  struct rps_addr_counts *t = rps_addr_counts_create();
  assert_non_null(t);
  struct rps_addr_key a = v4("10.0.0.1"), b = v4("10.0.0.2");
  for (int i = 0; i < 5; i++)
    assert_int_equal(rps_addr_count_add(t, &a), 0);
  assert_int_equal(rps_addr_count_add(t, &b), 0);
  assert_int_equal(rps_addr_count(t, &a), 5);
  assert_int_equal(rps_addr_count(t, &b), 1);
  assert_int_equal(rps_addr_counts_addresses(t), 2);
  rps_addr_count_remove(t, &b);
  assert_int_equal(rps_addr_count(t, &b), 0);
  assert_int_equal(rps_addr_counts_addresses(t), 1);
  rps_addr_count_remove(t, &b); /* not counted: nothing happens */
  assert_int_equal(rps_addr_count(t, &a), 5);
  rps_addr_counts_destroy(t);
}

static void test_ipv4_mapped_is_the_same_host(void **state)
{
  struct rps_addr_key a = v4("192.0.2.7"), m = v6("::ffff:192.0.2.7", 99);
  assert_memory_equal(&a, &m, sizeof a);
  struct rps_addr_key p1 = v6("2001:db8::1", 1), p2 = v6("2001:db8::1", 2);
  assert_memory_equal(&p1, &p2, sizeof p1); /* the port does not matter */
}

static void test_many_addresses_leave_nothing(void **state)
{
  struct rps_addr_counts *t = rps_addr_counts_create();
  char text[32];
  for (int i = 0; i < 5000; i++) {
    snprintf(text, sizeof text, "10.%d.%d.%d", i >> 16, (i >> 8) & 255, i & 255);
    struct rps_addr_key k = v4(text);
    assert_int_equal(rps_addr_count_add(t, &k), 0);
  }
  assert_int_equal(rps_addr_counts_addresses(t), 5000);
  for (int i = 0; i < 5000; i++) {
    snprintf(text, sizeof text, "10.%d.%d.%d", i >> 16, (i >> 8) & 255, i & 255);
    struct rps_addr_key k = v4(text);
    assert_int_equal(rps_addr_count(t, &k), 1);
    rps_addr_count_remove(t, &k);
  }
  assert_int_equal(rps_addr_counts_addresses(t), 0);
  rps_addr_counts_destroy(t);
}

int main(void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_counts_per_address),
    cmocka_unit_test(test_ipv4_mapped_is_the_same_host),
    cmocka_unit_test(test_many_addresses_leave_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
