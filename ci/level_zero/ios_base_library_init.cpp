// std::ios_base_library_init(), which GCC 13's <iostream> makes every user call (GLIBCXX_3.4.32) so that libstdc++
// sets up the standard streams. Older libstdc++ has no such function; this one sets them up the older way.
#include <ios>

namespace std {
void ios_base_library_init() {
    static ios_base::Init init;
}
}  // namespace std
