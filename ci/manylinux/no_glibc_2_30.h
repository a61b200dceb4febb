// Included first in every C++ file of a wheel (ci/wheels): the sysroot's glibc is 2.31, but manylinux_2_28 allows
// nothing newer than 2.28. GCC 12's libstdc++ was configured for the build machine's glibc and would call
// pthread_cond_clockwait, pthread_mutex_clocklock and pthread_rwlock_clock*lock (glibc 2.30) inline; without them it
// waits on steady_clock deadlines through the older timed functions, as libstdc++ did before GCC 10.
#include <bits/c++config.h>
#undef _GLIBCXX_USE_PTHREAD_COND_CLOCKWAIT
#undef _GLIBCXX_USE_PTHREAD_MUTEX_CLOCKLOCK
#undef _GLIBCXX_USE_PTHREAD_RWLOCK_CLOCKLOCK
