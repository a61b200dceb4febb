// What GCC 12's headers call out of line but libstdc++ exports only from GCC 11 or 12 on: with these, a library
// compiled here and linked against GCC 10's libstdc++ (the sysroot's, ci/manylinux/sysroot.sh) asks the user's
// libstdc++ for nothing newer. ci/wheels links this archive into each library of a wheel with its symbols made local
// (--exclude-libs), as the manylinux images' toolchains do with their static "nonshared" part of libstdc++.
#include <dlfcn.h>

#include <exception>
#include <new>

namespace {

// exception_ptr's out-of-line copy constructor and destructor, which every libstdc++ since GCC 4.5 exports as
// CXXABI_1.3.3, looked up in libstdc++ itself: a plain call would bind to the inline copy from GCC 12's header, which
// calls back into the functions below.
template <typename Function>
Function from_libstdcxx(const char *name) {
  void *library = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
  return reinterpret_cast<Function>(library ? dlvsym(library, name, "CXXABI_1.3.3") : nullptr);
}

}  // namespace

namespace std {

void __throw_bad_array_new_length() { throw bad_array_new_length(); }  // GLIBCXX_3.4.29

namespace __exception_ptr {

// CXXABI_1.3.13: one more reference, held by a copy that is never destroyed.
void exception_ptr::_M_addref() noexcept {
  static const auto copy =
      from_libstdcxx<void (*)(void *, const void *)>("_ZNSt15__exception_ptr13exception_ptrC1ERKS0_");
  void *extra_reference;
  copy(&extra_reference, this);
}

// CXXABI_1.3.13: one reference fewer, by destroying a copy of the pointer (the exception goes with the last one).
void exception_ptr::_M_release() noexcept {
  static const auto destroy = from_libstdcxx<void (*)(void *)>("_ZNSt15__exception_ptr13exception_ptrD1Ev");
  void *reference = _M_exception_object;
  destroy(&reference);
}

}  // namespace __exception_ptr
}  // namespace std
