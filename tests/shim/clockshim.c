/* Clock-jump shim for redis-server (reliability.md, Appendix A), test-only.
 * LD_PRELOAD it with CLOCKSHIM_FILE naming an 8-byte file: a little-endian i64 offset in
 * milliseconds, added to CLOCK_REALTIME (clock_gettime, gettimeofday, time). Rewriting the file
 * jumps the process's wall clock at once (the file is mmapped). Raw syscalls only, so it never
 * re-enters jemalloc (why libfaketime fails with Debian's redis-server). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>
#include <time.h>
#include <sys/time.h>
#include <sys/mman.h>
#include <sys/syscall.h>
static volatile int64_t *off_ms; static int tried;
static int64_t offset(void){
  if(!tried){ tried=1; const char*f=getenv("CLOCKSHIM_FILE"); if(!f) f="/tmp/clockshim.off";
    int fd=open(f,O_RDONLY); if(fd>=0){ void*p=mmap(0,8,PROT_READ,MAP_SHARED,fd,0); if(p!=MAP_FAILED) off_ms=p; close(fd);} }
  return off_ms? *off_ms : 0; }
int clock_gettime(clockid_t c, struct timespec*ts){
  int r=syscall(SYS_clock_gettime,c,ts);
  if(r==0 && (c==CLOCK_REALTIME||c==CLOCK_REALTIME_COARSE)){ int64_t o=offset();
    int64_t ns=(int64_t)ts->tv_nsec+(o%1000)*1000000; ts->tv_sec+=o/1000+ns/1000000000; ns%=1000000000;
    if(ns<0){ns+=1000000000;ts->tv_sec--;} ts->tv_nsec=ns; }
  return r; }
int gettimeofday(struct timeval*tv, void*tz){ struct timespec ts; int r=clock_gettime(CLOCK_REALTIME,&ts);
  if(r==0&&tv){tv->tv_sec=ts.tv_sec; tv->tv_usec=ts.tv_nsec/1000;} return r; }
time_t time(time_t*t){ struct timespec ts; clock_gettime(CLOCK_REALTIME,&ts); if(t)*t=ts.tv_sec; return ts.tv_sec; }
