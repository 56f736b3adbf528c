"""Writes pydantic v2 model_json_schema() fixtures (pydantic-*.json) into the folder given as argv[1].

Run through scripts/gen-schema-fixtures.ts (or directly: python3 scripts/gen-pydantic-schemas.py
test/fixtures/schemas/). Needs pydantic v2; the suite itself only reads the JSON files.
EmailStr is left out: it needs the optional email-validator package.
"""
import datetime
import decimal
import enum
import json
import sys
import uuid
from typing import Annotated, Dict, List, Literal, Optional, Tuple, Union

import pydantic
from pydantic import AnyUrl, BaseModel, Field, HttpUrl, IPvAnyAddress
from ipaddress import IPv4Address, IPv6Address


class Color(str, enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Primitives(BaseModel):
    s: str
    i: int
    f: float
    b: bool
    none: None
    lit: Literal["fixed"]
    color: Color
    level: Level
    bounded: Annotated[int, Field(ge=0, le=100)]
    ratio: Annotated[float, Field(gt=0, lt=1)]
    code: Annotated[str, Field(min_length=2, max_length=5, pattern=r"^[a-z]+$")]
    short: Annotated[str, Field(max_length=10)]


class Formats(BaseModel):
    d: decimal.Decimal
    td: datetime.timedelta
    raw: bytes
    ip: IPvAnyAddress
    ip4: IPv4Address
    ip6: IPv6Address
    dt: datetime.datetime
    day: datetime.date
    t: datetime.time
    u: uuid.UUID
    url: HttpUrl
    any_url: AnyUrl


class Address(BaseModel):
    street: str
    city: str
    zip: Annotated[str, Field(pattern=r"^\d{5}$")]


class OptionalNullable(BaseModel):
    required: str
    optional: Optional[str] = None
    nullable_required: Optional[int]
    with_default: int = 3
    address: Optional[Address] = None
    union_default: Union[int, str] = 0


class Cat(BaseModel):
    pet_type: Literal["cat"]
    meows: int


class Dog(BaseModel):
    pet_type: Literal["dog"]
    barks: float


class Unions(BaseModel):
    plain: Union[int, str, bool]
    pet: Union[Cat, Dog] = Field(discriminator="pet_type")
    maybe_pet: Optional[Union[Cat, Dog]] = None
    number_or_list: Union[float, List[float]]


class Collections(BaseModel):
    tags: List[str]
    scores: Dict[str, float]
    nested: Dict[str, List[int]]
    pair: Tuple[int, str]
    variadic: Tuple[int, ...]
    bounded: Annotated[List[int], Field(min_length=1, max_length=4)]


class Person(BaseModel):
    name: str
    address: Address
    addresses: List[Address]


class Nested(BaseModel):
    person: Person
    manager: Optional[Person] = None


class TreeNode(BaseModel):
    value: int
    children: List["TreeNode"] = []


class Recursive(BaseModel):
    tree: TreeNode


MODELS = {
    "primitives": Primitives,
    "formats": Formats,
    "optional-nullable": OptionalNullable,
    "unions": Unions,
    "collections": Collections,
    "nested": Nested,
    "recursive": Recursive,
}


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "test/fixtures/schemas/"
    for name, model in MODELS.items():
        with open(f"{out.rstrip('/')}/pydantic-{name}.json", "w") as f:
            json.dump(model.model_json_schema(), f, indent=2)
            f.write("\n")
    print(f"wrote {len(MODELS)} pydantic fixtures (pydantic {pydantic.VERSION})")


if __name__ == "__main__":
    main()
