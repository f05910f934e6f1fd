// The pickle machine on its own: plain data as JSON (what pickle.dumps wrote,
// Python 3.11, inline below), and the pickles it refuses or bounds.
#include <span>
#include <string>

#include "hone/core/pickle.hpp"
#include "support/check.hpp"

namespace hone::test {
namespace {

std::span<const std::byte> bytes_of(const std::string& s) { return {reinterpret_cast<const std::byte*>(s.data()), s.size()}; }

// pickle.dumps({'n': None, 't': True, 'i': -7, 'big': 2**40, 'f': 1.5, 's': 'é', 'l': [1, (2, 'x')],
//               'd': {3: 'three'}}, protocol=4)
const std::string kPlain(
    "\200\004\225_\000\000\000\000\000\000\000}\224(\214\001n\224N\214\001t\224\210\214\001i\224J\371\377\377\377\214"
    "\003big\224\212\006\000\000\000\000\000\001\214\001f\224G?\370\000\000\000\000\000\000\214\001s\224\214\002\303"
    "\251\224\214\001l\224]\224(K\001K\002\214\001x\224\206\224e\214\001d\224}\224K\003\214\005three\224su.",
    106);

TEST(Pickle, PlainDataReadsAsJson) {
  const nlohmann::ordered_json got = pickle::read_plain_data(bytes_of(kPlain), "plain.pkl", 100);
  EXPECT_EQ(got.dump(), R"({"n":null,"t":true,"i":-7,"big":1099511627776,"f":1.5,"s":"é","l":[1,[2,"x"]],)"
                        R"("d":{"3":"three"}})");
  // The budget counts values: 14 here.
  EXPECT_NO_THROW(pickle::read_plain_data(bytes_of(kPlain), "plain.pkl", 14));
  EXPECT_EQ(error_of([&] { pickle::read_plain_data(bytes_of(kPlain), "plain.pkl", 13); }),
            "plain.pkl: holds more than plain data of at most 13 values nested 64 deep (dicts, lists, strings, "
            "numbers)");
}

TEST(Pickle, AKeySetTwiceKeepsItsPlaceAndTakesTheLaterValue) {
  // {'a': 1, 'b': 2} built by SETITEMS with 'a' set again after 'b', as a Python dict reads it: {'a': 3, 'b': 2}.
  const std::string twice("\200\002}(X\001\000\000\000aK\001X\001\000\000\000bK\002X\001\000\000\000aK\003u.", 30);
  EXPECT_EQ(pickle::read_plain_data(bytes_of(twice), "twice.pkl", 10).dump(), R"({"a":3,"b":2})");
}

TEST(Pickle, CyclesCallsAndPersistentIdsAreNotPlainData) {
  // l = []; l.append(l): a list that holds itself, never read to its end.
  const std::string cycle("\200\002]q\000h\000a.", 9);
  EXPECT_NE(error_of([&] { pickle::read_plain_data(bytes_of(cycle), "cycle.pkl", 1000); }).find("holds more than plain data"),
            std::string::npos);
  const std::string calls("\200\002" "cposix\nsystem\n" "X\002\000\000\000" "ls\205R.", 26);
  EXPECT_EQ(error_of([&] { pickle::read_plain_data(bytes_of(calls), "calls.pkl", 10); }),
            "calls.pkl (offset 24): the pickle calls posix.system: hone reads plain data (dicts, lists, strings, "
            "numbers), nothing else");
  const std::string persistent("\200\002X\001\000\000\000kQ.", 10);
  EXPECT_EQ(error_of([&] { pickle::read_plain_data(bytes_of(persistent), "id.pkl", 10); }),
            "id.pkl (offset 8): a persistent id, which only the pickle of a torch.save archive holds");
  EXPECT_EQ(error_of([&] { pickle::read_plain_data(bytes_of(std::string("\200\002}", 3)), "cut.pkl", 10); }),
            "cut.pkl (offset 3): needs 1 bytes, 0 are left");
}

}  // namespace
}  // namespace hone::test
